"""Index a directory with the real engines and run one query of each kind.

    python scripts/quickstart.py [PATH] [--data-dir DIR]

PATH defaults to the sample resource in ``data/sample``; DIR defaults to a
fresh temporary directory (so the quick start never touches ``./data``).
The engines are those of ``$ACMS_PROFILE`` (default ``local``; ``remote``
indexes into the servers the environment names).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

import structlog

from cleveragents.bootstrap import (
    bootstrap,
    entry_profile,
    lean_container_import,
    private_umask,
)
from cleveragents.domain.models.acms.errors import AcmsError
from cleveragents.domain.models.acms.uko import UKO, resource_uri

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
    private_umask()  # this process owns the data directory: owner-only files
    lean_container_import()  # an entry point: see the function
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="acms-quickstart-"))
    try:
        return run(args.path.resolve(), data_dir, args.query)
    except (AcmsError, OSError) as exc:
        print(f"quickstart: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"quickstart: {exc}", file=sys.stderr)
        return 2


def run(path: Path, data_dir: Path, query: str | None) -> int:
    """The same steps as ``acms project add`` / ``resource add`` / ``reindex`` / queries."""
    profile = entry_profile()
    ops = bootstrap(data_dir, profile=profile)
    name = "local/quickstart"
    if ops.projects.get(name) is None:
        ops.add_project(name)
    # A second run over the same data directory reuses the resource.
    same = [r for r in ops.list_resources(name) if Path(r.location).resolve() == path]
    resource = same[0] if same else ops.add_resource(str(path), name)
    report = ops.reindex(resources=[resource.resource_id])
    stats = report.total
    print(f"data dir:  {data_dir}  (profile: {profile})")
    print(f"resource:  {resource.resource_id}  {path}  ({resource.resource_type})")
    print(
        f"indexed:   {stats.files_indexed} files, {stats.units_written} chunks "
        f"in {report.seconds:.1f} s"
    )
    view = ops.view(frozenset({resource.resource_id}))
    words = query or ("quokkasample" if path == SAMPLE.resolve() else "def OR class OR function")
    print(f"\n== text search {words!r}")
    hits = view.search(words, max_results=5)
    for r in hits:
        print(f"  {r.score:.3f}  {r.metadata.get('path')}:{r.metadata.get('start_line')}")
    print("\n== vector search 'reserve units of stock'")
    for v in view.similarity_search(ops.embed_query("reserve units of stock"), top_k=3):
        print(f"  {v.score:.3f}  {v.metadata.get('path')}:{v.metadata.get('start_line')}")
    print("\n== SPARQL: symbols defined per file (first 10)")
    rows = view.sparql_query(
        f"SELECT ?file ?kind ?name WHERE {{ ?file <{UKO}defines> ?s . "
        f"?s <{UKO}name> ?name . ?s <{UKO}kind> ?kind }} ORDER BY ?file ?name LIMIT 10"
    ).triples
    for f, kind, sym in rows:
        print(f"  {f.rsplit('/', 1)[-1]:<24} {kind:<9} {sym}")
    print("\n== traverse from the resource, depth 2 (first 10 edges)")
    for s, p, o in view.traverse(resource_uri(resource.resource_id), depth=2).triples[:10]:
        print(f"  {s.rsplit('/', 1)[-1]} --{p.rsplit('#', 1)[-1]}--> {o.rsplit('/', 1)[-1]}")
    print(f"\nNext: acms --data-dir {data_dir} search text WORD --project {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
