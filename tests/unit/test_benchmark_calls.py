"""``benchmarks/run.py`` calls the other benchmark modules with arguments
their functions accept.

The suite turns a group that raises into a ``FAILED`` row and runs on, so a
signature that drifted (``bench_index.run`` gained ``base_jobs``; the call in
``run.py`` did not) went unnoticed until a full run.  The benchmarks are not
type-checked, and a full run takes half an hour: this binds each call's
arguments to the callee's signature instead, without running anything.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _module_calls(path: Path) -> list[tuple[str, str, ast.Call]]:
    """(module, function, call) for each ``module.function(...)`` call on an
    imported ``bench_*`` module."""
    tree = ast.parse(path.read_text())
    modules = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.startswith("bench_")
    }
    return [
        (node.func.value.id, node.func.attr, node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in modules
    ]


def _bindable(func: object, call: ast.Call) -> bool:
    if any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        return True  # *args / **kwargs: cannot tell statically
    signature = inspect.signature(func)  # type: ignore[arg-type]
    try:
        signature.bind(*call.args, **{k.arg: k.value for k in call.keywords if k.arg})
    except TypeError:
        return False
    return True


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))


def test_the_suite_calls_each_benchmark_as_it_is_defined(on_path: None) -> None:
    calls = _module_calls(BENCHMARKS / "run.py")
    assert {(m, f) for m, f, _ in calls} >= {("bench_index", "run"), ("bench_cold", "bench_all")}
    wrong = []
    for module, name, call in calls:
        func = getattr(importlib.import_module(module), name)
        if callable(func) and not _bindable(func, call):
            wrong.append(f"run.py:{call.lineno} {module}.{name}{inspect.signature(func)}")
    assert not wrong, wrong


def test_a_drifted_call_is_caught(on_path: None) -> None:
    """The check itself: a call missing an argument does not bind."""
    import bench_index

    call = ast.parse("bench_index.run(True, 1, 'abc')").body[0].value  # type: ignore[attr-defined]
    assert not _bindable(bench_index.run, call)
    call = ast.parse("bench_index.run(True, 1, 'abc', [])").body[0].value  # type: ignore[attr-defined]
    assert _bindable(bench_index.run, call)
