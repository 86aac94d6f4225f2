"""Index a directory with the real engines and run one query of each kind.

    python scripts/quickstart.py [PATH] [--data-dir DIR]

PATH defaults to the sample resource in ``data/sample``; DIR defaults to a
fresh temporary directory (so the quick start never touches ``./data``).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

import structlog

from cleveragents.application.container import build_container
from cleveragents.application.services.context_tier_hydrator import hydrate_tiers_for_plan
from cleveragents.domain.models.acms.errors import AcmsError
from cleveragents.domain.models.acms.scope import ScopedView
from cleveragents.domain.models.acms.uko import UKO, file_uri

SAMPLE = Path(__file__).resolve().parent.parent / "data" / "sample"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", nargs="?", type=Path, default=SAMPLE)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--query", default=None, help="text query (default: a word from a file)")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if not args.path.is_dir():
        print(f"quickstart: not a directory: {args.path}", file=sys.stderr)
        return 2
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="acms-quickstart-"))
    try:
        return run(args.path.resolve(), data_dir, args.query)
    except AcmsError as exc:
        print(f"quickstart: {exc}", file=sys.stderr)
        return 1


def run(path: Path, data_dir: Path, query: str | None) -> int:
    c = build_container("local", data_dir)
    projects, resources = c.project_repository(), c.resource_registry()
    name = "local/quickstart"
    if projects.get(name) is None:
        projects.add(name)
    is_git = (path / ".git").exists()
    resource = resources.register(path, "git-checkout" if is_git else "directory")
    projects.link(name, resource.resource_id)
    n = hydrate_tiers_for_plan(
        c.context_tier_service(), [name], projects, resources, indexer=c.indexer()
    )
    print(f"data dir:  {data_dir}")
    print(f"resource:  {resource.resource_id}  {path}")
    print(f"hydrated:  {n} fragments in the HOT tier")
    view = ScopedView(
        c.text_backend(), c.vector_backend(), c.graph_backend(), frozenset({resource.resource_id})
    )
    words = query or ("quokkasample" if path == SAMPLE.resolve() else "def OR class OR function")
    print(f"\n== text search {words!r}")
    hits = view.search(words, max_results=5)
    for r in hits:
        print(f"  {r.score:.3f}  {r.metadata.get('path')}:{r.metadata.get('start_line')}")
    if hits:
        print(f"\n== vector search (the text of {hits[0].metadata.get('path')})")
        emb = c.embedder().embed([hits[0].content])[0].tolist()
        for v in view.similarity_search(emb, top_k=3):
            print(f"  {v.score:.3f}  {v.metadata.get('path')}:{v.metadata.get('start_line')}")
    print("\n== SPARQL: symbols defined per file (first 10)")
    rows = view.sparql_query(
        f"SELECT ?file ?kind ?name WHERE {{ ?file <{UKO}defines> ?s . "
        f"?s <{UKO}name> ?name . ?s <{UKO}kind> ?kind }} ORDER BY ?file ?name LIMIT 10"
    ).triples
    for f, kind, sym in rows:
        print(f"  {f.rsplit('/', 1)[-1]:<24} {kind:<9} {sym}")
    print("\n== traverse from the resource, depth 2 (first 10 edges)")
    start = file_uri(resource.resource_id, "x").rsplit("/", 1)[0]
    for s, p, o in view.traverse(start, depth=2).triples[:10]:
        print(f"  {s.rsplit('/', 1)[-1]} --{p.rsplit('#', 1)[-1]}--> {o.rsplit('/', 1)[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
