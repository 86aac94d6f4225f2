"""The fork server's last word: silent only when a worker's start failed
because the writer gave up on it, never when a worker's own code failed."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from cleveragents.application.services.fork_server import _only_multiprocessing

INSIDE = os.path.join(os.path.dirname(multiprocessing.__file__ or ""), "spawn_fake.py")


def traceback_of(filename: str) -> BaseException:
    code = compile("def start():\n    raise FileNotFoundError(2, 'gone')\n", filename, "exec")
    space: dict[str, object] = {}
    exec(code, space)
    try:
        space["start"]()  # type: ignore[operator]
    except FileNotFoundError as exc:
        return exc
    raise AssertionError("not raised")


def test_a_start_that_failed_inside_multiprocessing_only_is_silent() -> None:
    exc = traceback_of(INSIDE)
    assert exc.__traceback__ is not None
    # Without this test's own frame: what the fork server's child sees.
    assert _only_multiprocessing(exc.__traceback__.tb_next)


@pytest.mark.parametrize("where", [__file__, "/src/cleveragents/index_workers.py"])
def test_a_worker_s_own_code_in_the_traceback_is_printed(where: str) -> None:
    exc = traceback_of(where)
    assert exc.__traceback__ is not None
    assert not _only_multiprocessing(exc.__traceback__.tb_next)
    assert not _only_multiprocessing(exc.__traceback__)
