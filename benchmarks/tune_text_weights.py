"""Tune the plain syntax's weights on the retrieval evaluation's questions.

Indexes the quick evaluation corpora once (``benchmarks/eval``), then runs the
text system's questions under each weight setting of ``tantivy_query``
(``W_NAMES``, ``W_EXACT``, ``EXACT_SHARED``, ``W_PHRASE``, ``W_PROXIMITY``) and prints MRR@10
and hit@1 per question kind, next to the two baselines of the same run.

    PYTHONPATH=src python benchmarks/tune_text_weights.py [--full]
"""

from __future__ import annotations

import argparse
import itertools
import logging
import sys
import tempfile
import time
from pathlib import Path

import structlog

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "eval"))

import questions as Q  # noqa: E402
import run_eval as E  # noqa: E402
from baselines import Bm25Windows, GrepFiles  # noqa: E402

from cleveragents.infrastructure.acms import tantivy_query  # noqa: E402

GRID = {
    "W_NAMES": (0.5,),
    "W_EXACT": (4.0,),
    "EXACT_SHARED": (True,),
    "W_PHRASE": (2.0,),
    "W_PROXIMITY": (2.0,),
    "PROXIMITY_ALL_PAIRS": (True,),
    "MIN_PROXIMITY_WORDS": (3, 4),
    "W_NAMES_LIST": (0.0,),
    "W_CASE": (0.5,),
    "EXACT_LIST_MIN": (2,),
}


def evaluate(run, qs: list) -> dict[str, dict[str, float]]:
    rows = []
    for q in qs:
        rows.append({**E.score(q, run(q.query)), "refused": False, "q": q})
    out = {k: E.aggregate([r for r in rows if r["q"].kind == k]) for k in E.KINDS}
    out["all"] = E.aggregate(rows)
    return out


def line(name: str, result: dict[str, dict[str, float]]) -> str:
    cells = "  ".join(
        f"{k[:5]} {result[k]['mrr10']:.3f}/{result[k]['hit1']:.2f}" for k in (*E.KINDS, "all")
    )
    return f"{name:<44} {cells}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--full", action="store_true")
    parser.add_argument(
        "--defaults", action="store_true", help="only the weights as they are in tantivy_query"
    )
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory(prefix="acms-tune-") as tmp:
        base = Path(tmp)
        roots = Q.copy_corpora(base / "corpora", full=args.full)
        defs = Q.python_definitions(roots["stdlib"], "stdlib") + Q.c_definitions(
            roots["mypyc-rt"], "mypyc-rt"
        )
        qs = Q.build_questions(defs, roots, per_kind=100 if args.full else 15)
        ops, _emb, scope, corpus_of, _secs, _units = E.build_index(base / "data", roots)
        view = ops.view(scope)
        backend = view._text

        def text(q: str) -> list:
            found = view.search(q, max_results=50)
            return [h for h in (E._unit_hit(r.uko_uri, corpus_of) for r in found) if h]

        bm25, grep = Bm25Windows(roots), GrepFiles(roots)
        print(f"{len(qs)} questions; MRR@10/hit@1 per kind", file=sys.stderr)
        print(line("baseline bm25-50-lines", evaluate(bm25.search, qs)))
        print(line("baseline grep-files", evaluate(grep.search, qs)))
        names = list(GRID)
        grid = {n: (getattr(tantivy_query, n),) for n in GRID} if args.defaults else GRID
        for values in itertools.product(*grid.values()):
            for name, value in zip(names, values, strict=True):
                setattr(tantivy_query, name, value)
            backend._parsed.clear()
            backend._plans.clear()  # a scope of several resources: the reweighted clauses
            t0 = time.perf_counter()
            result = evaluate(text, qs)
            ms = (time.perf_counter() - t0) * 1000 / len(qs)
            label = " ".join(
                f"{n.removeprefix('W_').lower()}={v:g}" for n, v in zip(names, values, strict=True)
            )
            print(line(f"{label} {ms:.1f}ms", result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
