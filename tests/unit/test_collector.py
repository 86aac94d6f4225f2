"""paused_collector: automatic cyclic collection off for a block, restored
by the last of any concurrent blocks, never switched on for a process that
had it off."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from cleveragents import _collector as collector
from cleveragents._collector import collect_when_due, paused_collector


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    # Restore the state found, both ways: a test may leave it switched off.
    if was:
        gc.enable()
    else:
        gc.disable()


def test_off_inside_and_back_on_after_a_block_even_one_that_raises() -> None:
    with paused_collector():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), paused_collector():
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_nested_blocks_restore_only_at_the_outermost() -> None:
    with paused_collector():
        with paused_collector():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_process_with_the_collector_off_keeps_it_off() -> None:
    gc.disable()
    with paused_collector():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_overlapping_blocks_in_two_threads() -> None:
    # A enters, B enters, A leaves (B still inside: stays off), B leaves: on.
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def a() -> None:
        with paused_collector():
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def b() -> None:
        a_in.wait(5)
        with paused_collector():
            b_in.set()
            a_out.wait(5)
            seen["b after a left"] = gc.isenabled()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"b after a left": False}
    assert gc.isenabled()


def test_a_long_pause_collects_once_per_period(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(collector.gc, "collect", lambda *a: calls.append(1) or 0)
    now = [1000.0]
    monkeypatch.setattr(collector.time, "monotonic", lambda: now[0])
    collect_when_due()
    assert calls == []  # not paused: the collector does its own work
    with paused_collector():
        collect_when_due()
        now[0] += collector.COLLECT_PERIOD - 1
        collect_when_due()
        assert calls == []
        now[0] += 1
        collect_when_due()
        collect_when_due()
        assert calls == [1]
        now[0] += collector.COLLECT_PERIOD
        collect_when_due()
        assert calls == [1, 1]
