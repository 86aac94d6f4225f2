"""The writer's C heap setting (``cleveragents._malloc``), checked against
glibc itself: where a large block comes from after a larger one was freed.

Each check runs in a fresh interpreter: the setting is process-wide and
glibc's threshold moves with what the process freed before.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from cleveragents import _malloc

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or _malloc._mallopt is None,
    reason="glibc's malloc only",
)

# Frees a 4 MiB block (glibc then raises its mmap threshold to 4 MiB unless
# it is fixed), then asks for 512 KiB: mapped on its own (``hblks`` + 1,
# from mallinfo2) or carved from the heap.
_PROBE = textwrap.dedent(
    """
    import ctypes, json, sys
    {setup}
    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
            "fsmblks", "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallinfo2.restype = MallInfo2
    big = libc.malloc(4 << 20)
    libc.free(big)
    before = libc.mallinfo2().hblks
    block = libc.malloc(512 << 10)
    after = libc.mallinfo2().hblks
    libc.free(block)
    print(json.dumps({{"mapped": after - before, "fixed": fixed}}))
    """
)


def _probe(setup: str) -> dict[str, int]:
    code = _PROBE.format(setup=setup)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    result: dict[str, int] = json.loads(out)
    return result


@glibc
def test_without_the_setting_a_large_block_comes_from_the_heap_after_a_larger_free() -> None:
    # The premise: glibc's dynamic threshold (if this ever changes, the
    # setting is moot, and this test says so).
    assert _probe("fixed = None") == {"mapped": 0, "fixed": None}


@glibc
def test_with_the_setting_a_large_block_stays_mapped() -> None:
    setup = "from cleveragents import _malloc\nfixed = _malloc.keep_large_blocks_mapped()"
    assert _probe(setup) == {"mapped": 1, "fixed": True}


@glibc
def test_a_write_session_sets_it_in_the_writer() -> None:
    setup = textwrap.dedent(
        """
        from cleveragents import _malloc
        from cleveragents.infrastructure.acms.index_store import ManagedIndexStore
        assert not _malloc._fixed
        store = ManagedIndexStore.in_memory(8)
        with store.session("01JD0000000000000000000000"):
            pass
        fixed = _malloc._fixed
        """
    )
    assert _probe(setup) == {"mapped": 1, "fixed": True}


def test_elsewhere_it_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_malloc, "_mallopt", None)
    monkeypatch.setattr(_malloc, "_trim", None)
    monkeypatch.setattr(_malloc, "_fixed", False)
    assert _malloc.keep_large_blocks_mapped() is False
    _malloc.release_memory()  # no libc: nothing to call, nothing raised
