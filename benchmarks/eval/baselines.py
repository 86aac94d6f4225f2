"""Two independent baselines, written here and sharing no code with the project.

- :class:`Bm25Windows`: Okapi BM25 (k1=1.2, b=0.75) over non-overlapping
  50-line windows of every file; tokens are lower-cased ``\\w+`` runs plus
  their ``snake_case``/``camelCase`` parts.
- :class:`GrepFiles`: what ``grep -wic`` over the tree gives a user: files
  ranked by how many distinct query words they contain as whole words
  (case-insensitive), then by how many matching lines, then by path; the line
  reported is the first with the most distinct query words.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

_TOKEN = re.compile(r"\w+")
_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")

Hit = tuple[str, str, int, int]  # corpus, path, start line, end line


def tokens(text: str) -> list[str]:
    out = []
    for tok in _TOKEN.findall(text):
        low = tok.lower()
        out.append(low)
        parts = [p.lower() for p in _PART.findall(tok)]
        if len(parts) > 1:
            out.extend(p for p in parts if p != low)
    return out


def _files(roots: dict[str, Path]) -> list[tuple[str, str, list[str]]]:
    out = []
    for corpus, root in sorted(roots.items()):
        for f in sorted(root.rglob("*")):
            if f.is_file():
                text = f.read_text(encoding="utf-8", errors="replace")
                out.append((corpus, f.relative_to(root).as_posix(), text.splitlines()))
    return out


class Bm25Windows:
    def __init__(self, roots: dict[str, Path], window: int = 50, k1: float = 1.2, b: float = 0.75):
        self.k1, self.b = k1, b
        self.docs: list[Hit] = []
        self.tf: list[Counter[str]] = []
        self.lengths: list[int] = []
        df: Counter[str] = Counter()
        for corpus, path, lines in _files(roots):
            for start in range(0, max(len(lines), 1), window):
                chunk = lines[start : start + window]
                counts = Counter(tokens("\n".join(chunk)))
                self.docs.append((corpus, path, start + 1, start + max(len(chunk), 1)))
                self.tf.append(counts)
                self.lengths.append(sum(counts.values()))
                df.update(counts.keys())
        n = len(self.docs)
        self.avg = sum(self.lengths) / max(n, 1)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self.postings: dict[str, list[int]] = {}
        for i, counts in enumerate(self.tf):
            for t in counts:
                self.postings.setdefault(t, []).append(i)

    def search(self, query: str, limit: int = 50) -> list[Hit]:
        scores: dict[int, float] = {}
        for term in set(tokens(query)):
            idf = self.idf.get(term)
            if idf is None:
                continue
            for i in self.postings[term]:
                f = self.tf[i][term]
                norm = self.k1 * (1 - self.b + self.b * self.lengths[i] / self.avg)
                scores[i] = scores.get(i, 0.0) + idf * f * (self.k1 + 1) / (f + norm)
        best = sorted(scores, key=lambda i: (-scores[i], self.docs[i]))[:limit]
        return [self.docs[i] for i in best]


class GrepFiles:
    def __init__(self, roots: dict[str, Path]):
        self.files = []
        for corpus, path, lines in _files(roots):
            words = [set(_TOKEN.findall(line.lower())) for line in lines]
            self.files.append((corpus, path, words, set().union(*words) if words else set()))

    def search(self, query: str, limit: int = 50) -> list[Hit]:
        wanted = {w.lower() for w in _TOKEN.findall(query) if len(w) > 1}
        ranked = []
        for corpus, path, line_words, all_words in self.files:
            present = wanted & all_words
            if not present:
                continue
            matching = 0
            best_line, best_count = 1, 0
            for n, words in enumerate(line_words, 1):
                count = len(wanted & words)
                if count:
                    matching += 1
                    if count > best_count:
                        best_line, best_count = n, count
            ranked.append((-len(present), -matching, corpus, path, best_line))
        ranked.sort()
        return [(c, p, line, line) for _, _, c, p, line in ranked[:limit]]
