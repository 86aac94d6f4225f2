"""Agent questions: 58 questions a coding agent asks, over four code bases,
with answers read off the code by a reviewer (not derived from this system).

    python benchmarks/eval/agent_questions.py              # hashing embedder
    ACMS_EMBEDDER=minilm python benchmarks/eval/agent_questions.py

Corpora: copies of the installed ``httpx``, ``click`` and ``starlette``
packages (this project's dependencies; their versions are printed) and of
this package's own ``src/cleveragents``, each its own project, indexed with
``AcmsOperations`` in a temporary data directory.  Questions
(``agent_questions.jsonl``): ``{id, project, kind, query, answers}``, kind
``nl`` (43: "where are HTTP redirects followed"), ``ident`` (3), ``exact``
(5: an identifier) or ``error`` (7: an error message); each answer is a
file and a symbol (``Client._send_handling_redirects``), resolved to its
lines with :mod:`ast` at run time (a symbol a version no longer has is
reported and its question left out).  Every question is asked through an
:class:`AgentSession` scoped to its project, as the ``search`` and
``context`` tools ask it.

Metrics per mode (``text``, ``vector``, ``hybrid``; ``context`` at a 4,000-
character budget): R@5 and MRR@10 over the hits' files, span@5 and spanMRR
over hits whose line range overlaps an answer's, and for ``context`` the
share of questions whose answer holds one of the lines it printed
(``ctx_line``) and the hits it held.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import shutil
import sys
import tempfile
from collections import defaultdict
from importlib.metadata import version
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "src"))

from cleveragents.bootstrap import bootstrap  # noqa: E402

QUESTIONS = HERE / "agent_questions.jsonl"
MODES = ("text", "vector", "hybrid", "context")
KINDS = ("all", "nl", "ident", "exact", "error")


def corpus_roots() -> dict[str, Path]:
    """Each corpus by project name: the installed package's directory, or
    this repository's package."""
    roots = {"cleveragents": REPO / "src" / "cleveragents"}
    for name in ("httpx", "click", "starlette"):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise SystemExit(f"{name} is not installed (pip install -e '.[dev]')")
        roots[name] = Path(spec.origin).parent
    return roots


def _definition(tree: ast.AST, qualified: str) -> ast.AST | None:
    nodes = [tree]
    for part in qualified.split("."):
        nodes = [
            child
            for node in nodes
            for child in ast.iter_child_nodes(node)
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and child.name == part
        ]
    return nodes[0] if nodes else None


def resolved_questions(corpora: Path) -> list[dict[str, Any]]:
    """The questions, each answer with its ``span`` of lines; questions with
    an answer that does not resolve are left out (and named on stderr)."""
    out = []
    for line in QUESTIONS.read_text().splitlines():
        question = json.loads(line)
        ok = True
        for answer in question["answers"]:
            if "lines" in answer:  # a span given as lines (not a definition)
                answer["span"] = answer["lines"]
                continue
            path = corpora / question["project"] / answer["path"]
            found = _definition(ast.parse(path.read_text()), answer["symbol"])
            if found is None:
                print(f"unresolved: {question['id']} {answer['symbol']}", file=sys.stderr)
                ok = False
                break
            decorators = [d.lineno for d in getattr(found, "decorator_list", [])]
            answer["span"] = [min([found.lineno, *decorators]), found.end_lineno]  # type: ignore[attr-defined]
        if ok:
            out.append(question)
    return out


def _hits(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "path": hit["path"],
            "start": hit["start_line"],
            "end": hit["end_line"],
            "lines": [line["line"] for line in hit.get("lines", [])],
        }
        for hit in answer["results"]
    ]


def score(questions: list[dict[str, Any]], raw: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each mode's metrics by question kind."""
    table: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for q in questions:
        answers = q["answers"]

        def in_file(hit: dict[str, Any], answers: list[dict[str, Any]] = answers) -> bool:
            return any(hit["path"] == a["path"] for a in answers)

        def in_span(hit: dict[str, Any], answers: list[dict[str, Any]] = answers) -> bool:
            return any(
                hit["path"] == a["path"]
                and hit["start"] <= a["span"][1]
                and hit["end"] >= a["span"][0]
                for a in answers
            )

        def on_line(hit: dict[str, Any], answers: list[dict[str, Any]] = answers) -> bool:
            return any(
                hit["path"] == a["path"]
                and any(a["span"][0] <= n <= a["span"][1] for n in hit["lines"])
                for a in answers
            )

        for mode, hits in raw[q["id"]].items():
            first = next((i for i, h in enumerate(hits[:10], 1) if in_file(h)), None)
            first_span = next((i for i, h in enumerate(hits[:10], 1) if in_span(h)), None)
            for kind in ("all", q["kind"]):
                row = table[(mode, kind)]
                row["R@5"].append(float(first is not None and first <= 5))
                row["MRR@10"].append(1 / first if first else 0.0)
                row["span@5"].append(float(first_span is not None and first_span <= 5))
                row["spanMRR"].append(1 / first_span if first_span else 0.0)
                if mode == "context":
                    row["ctx_line"].append(float(any(on_line(h) for h in hits)))
                    row["ctx_hits"].append(float(len(hits)))
    return {
        f"{mode}/{kind}": {"n": len(row["R@5"])}
        | {name: round(sum(values) / len(values), 3) for name, values in row.items()}
        for (mode, kind), row in sorted(table.items())
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="acms-agent-questions-") as tmp:
        base = Path(tmp)
        corpora = base / "corpora"
        for name, root in corpus_roots().items():
            shutil.copytree(root, corpora / name, ignore=shutil.ignore_patterns("__pycache__"))
        questions = resolved_questions(corpora)
        ops = bootstrap(base / "data")
        try:
            for name in sorted({q["project"] for q in questions}):
                ops.add_project(f"local/{name}")
                ops.add_resource(str(corpora / name), f"local/{name}")
            ops.reindex()
            sessions = {
                name: ops.agent_session(projects=[f"local/{name}"])
                for name in {q["project"] for q in questions}
            }
            raw: dict[str, dict[str, Any]] = {}
            for q in questions:
                session = sessions[q["project"]]
                raw[q["id"]] = {
                    mode: _hits(
                        session.context(q["query"], budget=4000)
                        if mode == "context"
                        else session.search(q["query"], mode=mode, max_results=10, budget=200_000)
                    )
                    for mode in MODES
                }
        finally:
            ops.close()
    figures = score(questions, raw)
    versions = {name: version(name) for name in ("httpx", "click", "starlette")}
    print(f"{len(questions)} questions; corpora: {versions} and src/cleveragents")
    for key, row in figures.items():
        print(key.ljust(16), "  ".join(f"{k}={v}" for k, v in row.items()))
    if args.out is not None:
        payload = {"questions": len(questions), "versions": versions, "figures": figures}
        args.out.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
