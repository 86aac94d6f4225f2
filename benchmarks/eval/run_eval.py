"""Retrieval evaluation: text, vector (hashing, MiniLM) and hybrid search against
two baselines, on questions whose answers are known by construction.

    python benchmarks/eval/run_eval.py --quick        # < 3 minutes on 2 cores
    python benchmarks/eval/run_eval.py                # larger corpora, more questions

Corpora and questions: see ``questions.py``; baselines: ``baselines.py``.  The
project's systems are indexed through ``AcmsOperations`` (project, resources,
reindex) exactly as a user would, in a temporary data directory, and queried
through a ``ScopedView`` over both resources.

Metrics per system and question kind (both corpora together, and per corpus):
MRR@10, hit@1 and hit@10 over the ranking of *files* (each system's units
deduplicated by file, first occurrence), and line hit@10: one of the first ten
units (chunks, windows, or grep's best line) overlaps the lines of the
answer's definition.  ``--sweep`` also fuses each question's text, vector and
graph rankings offline for a grid of ``k`` and weights (the measured defaults
of ``hybrid_search``).  ``refused`` counts queries a system answered with an error.
Writes ``eval-<mode>.json`` and ``eval-<mode>.md`` (``--out``, default
``benchmarks/eval/results``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import structlog

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "src"))

import questions as Q  # noqa: E402
from baselines import Bm25Windows, GrepFiles, Hit  # noqa: E402

from cleveragents.application.container import build_container  # noqa: E402
from cleveragents.application.services.embedding_text import (  # noqa: E402
    CompactTextEmbedder,
)
from cleveragents.application.services.fusion import (  # noqa: E402
    DEFAULT_CONFIDENT,
    DEFAULT_K,
    DEFAULT_WEIGHTS,
    hybrid_search,
    reciprocal_rank_fusion,
)
from cleveragents.application.services.operations import AcmsOperations  # noqa: E402
from cleveragents.domain.models.acms.errors import AcmsError  # noqa: E402
from cleveragents.domain.models.acms.uko import path_of, resource_id_of  # noqa: E402

KINDS = ("identifier", "docstring", "code-line", "calls", "paraphrase")
BASELINES = ("bm25-50-lines", "grep-files")


def beats(a: float, b: float, *, overall: bool = False) -> bool:
    """Whether an MRR@10 of ``a`` beats ``b`` (both rounded to 3 decimals).

    A strict win, except that a tie at 1.000 on one question kind counts: a
    perfect score cannot be bettered.  Overall (all kinds together) the win
    must be strict.
    """
    if a > b:
        return True
    return not overall and a == b == 1.0


def verdicts(result: dict) -> list[dict]:
    """The claims of issue 12 checked on this run, one row each."""
    sysm = result["systems"]

    def mrr(system: str, kind: str) -> float | None:
        data = sysm.get(system, {}).get("by_kind", {}).get(kind, {"n": 0})
        return data["mrr10"] if data["n"] else None

    rows = []

    def claim(label: str, a: str, b: str, kinds: tuple[str, ...]) -> None:
        if a not in sysm or b not in sysm:
            return
        cells, ok = {}, True
        for kind in kinds:
            x, y = mrr(a, kind), mrr(b, kind)
            if x is None or y is None:
                continue
            won = beats(x, y, overall=kind == "all")
            ok &= won
            cells[kind] = (x, y, won)
        rows.append({"claim": label, "a": a, "b": b, "cells": cells, "holds": ok})

    every = (*KINDS, "all")
    for base in BASELINES:
        claim(f"text beats {base} on every kind", "text", base, every)
    for name in ("hashing", "minilm"):
        claim(f"hybrid-{name} beats text overall", f"hybrid-{name}", "text", ("all",))
    claim("MiniLM beats text on paraphrase", "vector-minilm", "text", ("paraphrase",))
    claim("MiniLM beats hashing on paraphrase", "vector-minilm", "vector-hashing", ("paraphrase",))
    return rows


def verdict_markdown(rows: list[dict]) -> list[str]:
    lines = [
        "## Verdicts (MRR@10, A vs B)",
        "",
        '"Beats" = a strictly higher MRR@10 (3 decimals) on each kind listed, except',
        "that a tie at 1.000 on one kind counts (a perfect score cannot be bettered);",
        "over all questions the win must be strict.",
        "",
        "| claim | " + " | ".join((*KINDS, "all")) + " | holds |",
        "|" + "---|" * (len(KINDS) + 3),
    ]
    for row in rows:
        cells = []
        for kind in (*KINDS, "all"):
            cell = row["cells"].get(kind)
            if cell is None:
                cells.append("")
            else:
                x, y, won = cell
                cells.append(f"{x:.3f} vs {y:.3f} {'yes' if won else '**no**'}")
        holds = "**yes**" if row["holds"] else "**NO**"
        lines.append(f"| {row['claim']} | " + " | ".join(cells) + f" | {holds} |")
    return lines


def build_index(data_dir: Path, roots: dict[str, Path], embedder=None):
    """Index the corpora through the project's own operations; returns
    (ops, embedder, scope, rid -> corpus, seconds, units)."""
    container = build_container("local", data_dir, embedder="hashing")
    if embedder is not None:
        from dependency_injector import providers

        container.embedder.override(providers.Object(embedder))
    ops = AcmsOperations.from_container(container)
    ops.add_project("eval/corpora")
    corpus_of = {}
    for corpus, root in sorted(roots.items()):
        rid = ops.add_resource(str(root), "eval/corpora", "directory").resource_id
        corpus_of[rid] = corpus
    t0 = time.perf_counter()
    report = ops.reindex()
    seconds = time.perf_counter() - t0
    units = report.total.units_written
    return ops, container.embedder(), frozenset(corpus_of), corpus_of, seconds, units


def _unit_hit(uri: str, corpus_of: dict[str, str]) -> Hit | None:
    rid = resource_id_of(uri)
    path = path_of(uri)
    if rid is None or path is None:
        return None
    frag = uri.rpartition("#")[2]
    start, _, end = frag.partition("-")
    try:
        lo, hi = int(start.lstrip("L")), int(end.lstrip("L"))
    except ValueError:
        lo, hi = 0, 0
    return (corpus_of.get(rid, "?"), path, lo, hi)


def systems(indexes, bm25: Bm25Windows, grep: GrepFiles) -> dict[str, Callable[[str], list[Hit]]]:
    out: dict[str, Callable[[str], list[Hit]]] = {}
    hashing = indexes["hashing"]
    ops, _emb, scope, corpus_of = hashing[:4]
    view = ops.view(scope)

    def hits(uris):
        return [h for h in (_unit_hit(u, corpus_of) for u in uris) if h is not None]

    out["text"] = lambda q: hits(r.uko_uri for r in view.search(q, max_results=50))
    # The same index through the query language (the default before the plain
    # mode): the reference for the plain mode's latency, measured in this run.
    out["text-syntax-tantivy"] = lambda q: hits(
        r.uko_uri for r in view.search(q, max_results=50, syntax="tantivy")
    )
    for name, (ops_e, emb_e, scope_e, corpus_e, *_rest) in indexes.items():
        view_e = ops_e.view(scope_e)

        def vector(q, view_e=view_e, emb_e=emb_e, corpus_e=corpus_e):
            row = emb_e.embed([q])[0].tolist()
            return [
                h
                for h in (
                    _unit_hit(r.uko_uri, corpus_e) for r in view_e.similarity_search(row, top_k=50)
                )
                if h is not None
            ]

        def hybrid(q, view_e=view_e, emb_e=emb_e, corpus_e=corpus_e):
            found = hybrid_search(view_e, emb_e, q, max_results=50)
            return [h for h in (_unit_hit(r.uko_uri, corpus_e) for r in found) if h is not None]

        out[f"vector-{name}"] = vector
        out[f"hybrid-{name}"] = hybrid
    out["bm25-50-lines"] = bm25.search
    out["grep-files"] = grep.search
    return out


def score(question: Q.Question, hits: list[Hit]) -> dict[str, float]:
    files: list[tuple[str, str]] = []
    for corpus, path, _lo, _hi in hits:
        key = (corpus, path)
        if key not in files:
            files.append(key)
    answer = (question.corpus, question.path)
    rank = files.index(answer) + 1 if answer in files[:10] else 0
    line_hit = any(
        (corpus, path) == answer and lo <= question.end and question.start <= hi
        for corpus, path, lo, hi in hits[:10]
    )
    first = hits[0] if hits else None
    return {
        "line1": float(
            first is not None
            and (first[0], first[1]) == answer
            and first[2] <= question.end
            and question.start <= first[3]
        ),
        "rr": 1.0 / rank if rank else 0.0,
        "hit1": float(rank == 1),
        "hit10": float(rank > 0),
        "line10": float(line_hit),
    }


def aggregate(rows: list[dict]) -> dict[str, float]:
    n = len(rows)
    if not n:
        return {"n": 0}
    return {
        "n": n,
        "mrr10": round(sum(r["rr"] for r in rows) / n, 3),
        "hit1": round(sum(r["hit1"] for r in rows) / n, 3),
        "hit10": round(sum(r["hit10"] for r in rows) / n, 3),
        "line_hit10": round(sum(r["line10"] for r in rows) / n, 3),
        "line_hit1": round(sum(r["line1"] for r in rows) / n, 3),
        "refused": sum(1 for r in rows if r["refused"]),
    }


def markdown(result: dict) -> str:
    lines = [
        f"# Retrieval evaluation ({result['mode']})",
        "",
        f"{result['questions']} questions over {', '.join(result['corpora'])}; "
        f"units indexed: {result['units']}; python {result['python']}.",
        "",
        "MRR@10 / hit@1 / hit@10 (files) / line hit@10; refused = queries answered with an error.",
        "",
    ]
    header = "| system | " + " | ".join(KINDS) + " | all | refused | p50 ms |"
    lines += [header, "|" + "---|" * (len(KINDS) + 4)]
    for system, data in result["systems"].items():
        cells = []
        for kind in (*KINDS, "all"):
            a = data["by_kind"].get(kind, {"n": 0})
            cells.append(
                f"{a['mrr10']:.2f} / {a['hit1']:.2f} / {a['hit10']:.2f} / {a['line_hit10']:.2f}"
                if a["n"]
                else "-"
            )
        refused = data["by_kind"]["all"].get("refused", 0)
        lines.append(
            f"| {system} | " + " | ".join(cells) + f" | {refused} | {data['p50_ms']:.1f} |"
        )
    lines += ["", "Questions per kind: " + ", ".join(f"{k} {v}" for k, v in result["n"].items())]
    lines += ["", *verdict_markdown(result["verdicts"])]
    p50 = {name: data["p50_ms"] for name, data in result["systems"].items()}
    if "text" in p50 and p50.get("text-syntax-tantivy"):
        ratio = p50["text"] / p50["text-syntax-tantivy"]
        lines += [
            "",
            f"Latency, p50 in this run: text (plain mode) {p50['text']:.1f} ms, the same "
            f"index through the query language {p50['text-syntax-tantivy']:.1f} ms "
            f"(ratio {ratio:.2f}); "
            + ", ".join(f"{n} {v:.1f} ms" for n, v in p50.items() if n.startswith("hybrid"))
            + ".",
        ]
    lines += ["", "Refused queries per kind (answered with an error):", ""]
    lines += ["| system | " + " | ".join(KINDS) + " |", "|" + "---|" * (len(KINDS) + 1)]
    for system, data in result["systems"].items():
        cells = [str(data["by_kind"][k].get("refused", 0)) for k in KINDS]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    lines += ["", "Line hit@1 (the first unit overlaps the definition):", ""]
    lines += ["| system | " + " | ".join(KINDS) + " |", "|" + "---|" * (len(KINDS) + 1)]
    for system, data in result["systems"].items():
        cells = [
            f"{data['by_kind'][k]['line_hit1']:.2f}" if data["by_kind"][k]["n"] else "-"
            for k in KINDS
        ]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    lines += ["", "Per corpus (MRR@10):", ""]
    corpora = result["corpora"]
    lines += [
        "| system | " + " | ".join(f"{c} {k}" for c in corpora for k in KINDS) + " |",
        "|" + "---|" * (len(corpora) * len(KINDS) + 1),
    ]
    for system, data in result["systems"].items():
        cells = []
        for c in corpora:
            for k in KINDS:
                a = data["by_corpus_kind"].get(f"{c}/{k}", {"n": 0})
                cells.append(f"{a['mrr10']:.2f}" if a["n"] else "-")
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    lines += ["", "Indexing: " + ", ".join(f"{k} {v}" for k, v in result["indexing"].items())]
    return "\n".join(lines) + "\n"


# Only the ratios of the weights matter (scaling all of them scales every
# score), so the text weight stays 1.0 and the others vary around it.
SWEEP_K = (1, 2, 5, 10, 30, 60)
SWEEP_TEXT = (1.0,)
SWEEP_VECTOR = (0.1, 0.25, 0.5, 1.0)
SWEEP_GRAPH = (0.0, 0.1, 0.25, 0.5)
# The text score from which hybrid_search answers with text alone (None: never).
SWEEP_CONFIDENT = (None, 0.7, 0.75, 0.8, 0.85)


def source_rankings(view, embedder, query: str) -> tuple[dict[str, list[str]], float]:
    """Each source's own ranking, through hybrid_search with one source
    weighted, and text's best score (what ``confident`` is compared with)."""
    out = {}
    for source in ("text", "vector", "graph"):
        weights = {s: float(s == source) for s in ("text", "vector", "graph")}
        try:
            found = hybrid_search(
                view, embedder, query, max_results=50, weights=weights, confident=None
            )
        except (AcmsError, ValueError):
            found = []
        out[source] = [h.uko_uri for h in found]
    try:
        top = max((r.score for r in view.search(query, max_results=1)), default=0.0)
    except (AcmsError, ValueError):
        top = 0.0
    return out, top


def sweep(indexes, qs: list[Q.Question]) -> dict[str, list[dict]]:
    """Offline fusion of cached source rankings for a grid of parameters."""
    out: dict[str, list[dict]] = {}
    for name, (ops, emb, scope, corpus_of) in indexes.items():
        view = ops.view(scope)
        cached = [source_rankings(view, emb, q.query) for q in qs]
        rows = []
        grid = itertools.product(SWEEP_K, SWEEP_TEXT, SWEEP_VECTOR, SWEEP_GRAPH, SWEEP_CONFIDENT)
        for k, wt, wv, wg, conf in grid:
            weights = {"text": wt, "vector": wv, "graph": wg}
            scored = []
            for q, (rankings, top) in zip(qs, cached, strict=True):
                if conf is not None and rankings["text"] and top >= conf:
                    rankings = {"text": rankings["text"]}  # text is sure: asked alone
                fused = reciprocal_rank_fusion(rankings, k=k, weights=weights, limit=50)
                hits = [_unit_hit(h.uko_uri, corpus_of) for h in fused]
                scored.append({**score(q, [h for h in hits if h]), "refused": False, "q": q})
            by_kind = {kd: aggregate([r for r in scored if r["q"].kind == kd]) for kd in KINDS}
            by_kind["all"] = aggregate(scored)
            rows.append({"k": k, "weights": weights, "confident": conf, "by_kind": by_kind})
        rows.sort(key=lambda r: (-r["by_kind"]["all"]["mrr10"], -r["by_kind"]["all"]["hit1"]))
        out[name] = rows
    return out


def sweep_markdown(result: dict) -> str:
    lines = ["", "## Fusion parameters (offline sweep, MRR@10)", ""]
    default = {"k": DEFAULT_K, "weights": dict(DEFAULT_WEIGHTS), "confident": DEFAULT_CONFIDENT}
    lines.append(
        f"Defaults: k={default['k']}, weights={default['weights']}, "
        f"confident={default['confident']} (text alone when its best score reaches it)."
    )
    for name, rows in result.get("sweep", {}).items():
        lines += ["", f"hybrid-{name}: best five, best without graph, the default", ""]
        lines += ["| k | text | vector | graph | confident | " + " | ".join(KINDS) + " | all |"]
        lines += ["|" + "---|" * (len(KINDS) + 6)]
        picked = rows[:5] + [r for r in rows if r["weights"]["graph"] == 0][:1]
        picked += [r for r in rows if r["confident"] is None][:1]
        picked += [
            r
            for r in rows
            if r["k"] == default["k"]
            and r["weights"] == default["weights"]
            and r["confident"] == default["confident"]
        ]
        for r in picked:
            w = r["weights"]
            cells = [f"{r['by_kind'][kd].get('mrr10', 0):.3f}" for kd in (*KINDS, "all")]
            lines.append(
                f"| {r['k']} | {w['text']} | {w['vector']} | {w['graph']} | {r['confident']} | "
                + " | ".join(cells)
                + " |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="small corpora, 15 questions a kind and corpus"
    )
    parser.add_argument("--per-kind", type=int, default=None, help="questions per kind and corpus")
    parser.add_argument("--no-minilm", action="store_true", help="skip the MiniLM embedder")
    parser.add_argument("--minilm-tokens", type=int, default=128)
    parser.add_argument("--compact-words", type=int, default=96)
    parser.add_argument("--sweep", action="store_true", help="sweep fusion k and weights")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    per_kind = args.per_kind or (15 if args.quick else 100)
    t_start = time.perf_counter()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # The library logs through structlog; here only warnings, and on stderr.
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )

    with tempfile.TemporaryDirectory(prefix="acms-eval-") as tmp:
        base = Path(tmp)
        roots = Q.copy_corpora(base / "corpora", full=not args.quick)
        defs = Q.python_definitions(roots["stdlib"], "stdlib") + Q.c_definitions(
            roots["mypyc-rt"], "mypyc-rt"
        )
        qs = Q.build_questions(defs, roots, per_kind=per_kind)
        print(f"{len(defs)} definitions, {len(qs)} questions", file=sys.stderr)

        indexes = {}
        indexing = {}
        ops, emb, scope, corpus_of, secs, units = build_index(base / "data-hashing", roots)
        indexes["hashing"] = (ops, emb, scope, corpus_of)
        indexing["hashing"] = f"{units} units in {secs:.1f} s"
        print(f"hashing index: {units} units, {secs:.1f} s", file=sys.stderr)
        if not args.no_minilm:
            from cleveragents.infrastructure.acms.minilm_embedder import MiniLMEmbedder

            inner = MiniLMEmbedder(max_tokens=args.minilm_tokens)
            minilm = CompactTextEmbedder(inner, args.compact_words)
            ops, emb, scope, corpus_of, secs, units = build_index(
                base / "data-minilm", roots, minilm
            )
            indexes["minilm"] = (ops, emb, scope, corpus_of)
            indexing["minilm"] = f"{units} units in {secs:.1f} s ({units / secs:.0f} units/s)"
            print(f"minilm index: {units} units, {secs:.1f} s", file=sys.stderr)

        bm25, grep = Bm25Windows(roots), GrepFiles(roots)
        result: dict = {
            "mode": mode,
            "python": platform.python_version(),
            "corpora": sorted(roots),
            "questions": len(qs),
            "n": {k: sum(1 for q in qs if q.kind == k) for k in KINDS},
            "units": units,
            "indexing": indexing,
            "systems": {},
        }
        for system, run in systems(indexes, bm25, grep).items():
            rows, times = [], []
            for q in qs:
                t0 = time.perf_counter()
                refused = False
                try:
                    hits = run(q.query)
                except (AcmsError, ValueError) as exc:
                    hits, refused = [], True
                    del exc
                times.append((time.perf_counter() - t0) * 1000)
                rows.append({**score(q, hits), "refused": refused, "q": q})
            by_kind = {k: aggregate([r for r in rows if r["q"].kind == k]) for k in KINDS}
            by_kind["all"] = aggregate(rows)
            by_corpus_kind = {
                f"{c}/{k}": aggregate([r for r in rows if r["q"].kind == k and r["q"].corpus == c])
                for c in result["corpora"]
                for k in KINDS
            }
            result["systems"][system] = {
                "by_kind": by_kind,
                "by_corpus_kind": by_corpus_kind,
                "p50_ms": round(statistics.median(times), 2),
                # Per question (in question_set order): the answer file's rank
                # (0: not in the first ten), and whether the first unit hit its lines.
                "ranks": [round(1 / r["rr"]) if r["rr"] else 0 for r in rows],
                "line1": [int(r["line1"]) for r in rows],
            }
            print(f"{system}: {by_kind['all']}", file=sys.stderr)
        result["verdicts"] = verdicts(result)
        if args.sweep:
            result["sweep"] = sweep(indexes, qs)
        result["question_set"] = [q.as_dict() for q in qs]
        result["seconds"] = round(time.perf_counter() - t_start, 1)

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"eval-{mode}.json").write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result) + (sweep_markdown(result) if args.sweep else "")
    (args.out / f"eval-{mode}.md").write_text(text)
    print(text)
    print(f"done in {result['seconds']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
