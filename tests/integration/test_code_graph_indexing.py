"""The real indexer writes the tree-sitter code graph: symbols with their line
ranges, calls, bases and imports resolved to files, for several languages in
one resource, kept right by incremental reindexing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cleveragents.application.services.operations import AcmsOperations
from cleveragents.bootstrap import bootstrap
from cleveragents.domain.models.acms.uko import UKO, file_uri, name_uri, unit_uri

FILES = {
    "app/main.ts": (
        'import { area } from "./geometry";\n\n'
        "export function report(r: number): string {\n"
        "  return `area ${area(r)}`;\n}\n"
    ),
    "app/geometry.ts": "export function area(r: number): number {\n  return 3 * r * r;\n}\n",
    "lib/shapes.py": (
        "class Shape:\n    pass\n\n\nclass Circle(Shape):\n"
        "    def area(self):\n        return helper(self)\n\n\n"
        "def helper(c):\n    return 1\n"
    ),
    "native/util.c": (
        "static int twice(int x) { return 2 * x; }\nint four(void) { return twice(2); }\n"
    ),
}


@pytest.fixture
def indexed(tmp_path: Path) -> Iterator[tuple[AcmsOperations, str, Path]]:
    root = tmp_path / "repo"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    ops = bootstrap(tmp_path / "data", embedding_dimension=16)
    ops.add_project("local/g")
    rid = ops.add_resource(str(root), "local/g", "directory").resource_id
    ops.reindex()
    yield ops, rid, root
    ops._store().close()


def triples(ops: AcmsOperations, rid: str, subject: str) -> set[tuple[str, str, str]]:
    return set(ops.view(frozenset({rid})).get_triples(subject).triples)


def test_symbols_calls_bases_and_imports_reach_the_graph(
    indexed: tuple[AcmsOperations, str, Path],
) -> None:
    ops, rid, _ = indexed
    main = file_uri(rid, "app/main.ts")
    assert (main, UKO + "imports", file_uri(rid, "app/geometry.ts")) in triples(ops, rid, main)
    report = unit_uri(rid, "app/main.ts", "sym=report")
    got = triples(ops, rid, report)
    assert (report, UKO + "endLine", "5") in got
    assert (report, UKO + "calls", name_uri("area")) in got
    circle = unit_uri(rid, "lib/shapes.py", "sym=Circle")
    assert (circle, UKO + "inherits", unit_uri(rid, "lib/shapes.py", "sym=Shape")) in triples(
        ops, rid, circle
    )
    area = unit_uri(rid, "lib/shapes.py", "sym=Circle.area")
    assert (area, UKO + "calls", unit_uri(rid, "lib/shapes.py", "sym=helper")) in triples(
        ops, rid, area
    )
    four = unit_uri(rid, "native/util.c", "sym=four")
    assert (four, UKO + "calls", unit_uri(rid, "native/util.c", "sym=twice")) in triples(
        ops, rid, four
    )


def test_who_calls_area_across_files_by_sparql(indexed: tuple[AcmsOperations, str, Path]) -> None:
    ops, rid, _ = indexed
    rows = ops.view(frozenset({rid})).sparql_query(
        'SELECT ?caller ?p ?def WHERE { ?def uko:name "area" ; uko:named ?n . '
        "?caller uko:calls ?n . BIND(uko:calls AS ?p) }"
    )
    assert {s for s, _, _ in rows.triples} == {unit_uri(rid, "app/main.ts", "sym=report")}


def test_a_changed_file_replaces_its_symbols_and_calls(
    indexed: tuple[AcmsOperations, str, Path],
) -> None:
    ops, rid, root = indexed
    (root / "native" / "util.c").write_text("int four(void) { return thrice(2); }\n")
    ops.reindex()
    four = unit_uri(rid, "native/util.c", "sym=four")
    got = triples(ops, rid, four)
    assert (four, UKO + "calls", name_uri("thrice")) in got
    assert not any(o.endswith("sym=twice") for _, _, o in got)
    assert triples(ops, rid, unit_uri(rid, "native/util.c", "sym=twice")) == set()
