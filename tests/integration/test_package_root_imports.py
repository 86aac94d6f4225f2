"""A resource whose root is itself a Python package (``rdflib/`` indexed as
the resource): its files' absolute imports of their own package link files.

Before, ``from rdflib.namespace import RDF`` inside rdflib stayed a module
node when the indexed directory was ``rdflib/`` itself (1 importer of
``namespace/__init__.py`` instead of 317).  Both planners (in process, and
the worker pool) must agree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cleveragents.application.container import build_container
from cleveragents.application.services.operations import AcmsOperations
from cleveragents.domain.models.acms.uko import PREDICATES, file_uri, module_uri


def write_package(root: Path) -> None:
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("from mypkg.core import run\n")
    (root / "core.py").write_text(
        "from mypkg.util import helper\nimport mypkg.util\nimport os.path\n\n"
        "def run():\n    return helper()\n"
    )
    (root / "util.py").write_text("def helper():\n    return 1\n")
    (root / "path.py").write_text("# a local module named like os.path's last part\n")


@pytest.mark.parametrize("jobs", [1, 2])
def test_absolute_imports_of_the_root_package_link_its_files(tmp_path: Path, jobs: int) -> None:
    write_package(tmp_path / "mypkg")
    ops = AcmsOperations.from_container(
        build_container("local", tmp_path / "data", embedder="hashing")
    )
    ops.add_project("test/pkg")
    rid = ops.add_resource(str(tmp_path / "mypkg"), "test/pkg", "directory").resource_id
    ops.reindex(jobs=jobs)
    view = ops.view(frozenset({rid}))

    def imports(path: str) -> set[str]:
        triples = view.get_triples(file_uri(rid, path)).triples
        return {str(o) for _, p, o in triples if p == PREDICATES["imports"]}

    assert imports("core.py") == {file_uri(rid, "util.py"), module_uri("os.path")}
    assert imports("__init__.py") == {file_uri(rid, "core.py")}
