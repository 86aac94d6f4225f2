"""Crash points for tests: kill this process at a named write step.

The index store (``index_store``) calls :func:`checkpoint` right after each
durable write step of a session, a resource deletion and a rebuild.  A crash
test sets, for the process under test::

    ACMS_FAULT_AT=<step>[:<n>]

and the ``n``-th time (default 1) ``checkpoint(step)`` is reached, the process
sends itself ``SIGKILL``: no ``finally`` block, ``atexit`` hook or destructor
runs, exactly as when the kernel's OOM killer or a power cut stops a reindex.

The variable is read once, when this module is imported.  Unset (production),
:func:`checkpoint` returns at its first test; nothing else is looked up.  A
value that names no step of :data:`STEPS`, or a malformed count, raises
``ValueError`` at import, so a misspelt crash test fails loudly instead of
passing without ever crashing.

Steps (each fires right *after* the write it names has committed):

============================  ==========================================================
``index.dirty``               the resource's dirty marker is recorded (before its first
                              index write)
``index.text``                a batch's text upsert (new units in, stale ones out; a text
                              index with staged writes commits it at ``index.commit``)
``index.vector``              the same batch's vector upsert
``index.graph``               the resource graph upsert of the batched files
``index.commit``              the text writes staged since the last commit (before the
                              catalog rows of their files; staged text indexes only)
``index.catalog``             their catalog rows
``index.touch``               catalog rows of files whose mtime changed but content did not
``delete.catalog``            catalog rows of vanished files removed
``delete.text``               their text units deleted
``delete.vector``             their vector units deleted
``delete.graph``              their graph subjects deleted
``sweep.text``                a dirty resource's orphan text units deleted
``sweep.vector``              its orphan vector units deleted
``sweep.graph``               its orphan graph subjects deleted
``reembed.vector``            a batch of a changed embedder's re-embedded vectors (only the
                              embedder changed: no file is read; use ``:n``)
``index.clean``               the dirty marker is cleared (the session is complete)
``resource.delete``           one step of deleting a whole resource (catalog, then text,
                              vector, graph: use ``:n``)
``rebuild.staged``            ``.rebuild/`` holds complete fresh indexes, nothing swapped
``rebuild.swap``              one live index exchanged with its fresh copy (text, vectors,
                              graph, catalog: use ``:n``)
``rebuild.done``              ``.rebuild/`` renamed to ``.previous/``
============================  ==========================================================
"""

from __future__ import annotations

import os
import signal

__all__ = ["ENV_VAR", "STEPS", "checkpoint"]

ENV_VAR = "ACMS_FAULT_AT"

STEPS = (
    "index.dirty",
    "index.text",
    "index.vector",
    "index.graph",
    "index.commit",
    "index.catalog",
    "index.touch",
    "delete.catalog",
    "delete.text",
    "delete.vector",
    "delete.graph",
    "sweep.text",
    "sweep.vector",
    "sweep.graph",
    "reembed.vector",
    "index.clean",
    "resource.delete",
    "rebuild.staged",
    "rebuild.swap",
    "rebuild.done",
)


def _parse(raw: str | None) -> tuple[str, int] | None:
    if not raw:
        return None
    step, _, count = raw.partition(":")
    if step not in STEPS:
        raise ValueError(f"{ENV_VAR}={raw!r}: unknown step {step!r}; steps: {', '.join(STEPS)}")
    try:
        n = int(count) if count else 1
    except ValueError:
        raise ValueError(f"{ENV_VAR}={raw!r}: the count after ':' must be an integer") from None
    if n < 1:
        raise ValueError(f"{ENV_VAR}={raw!r}: the count must be at least 1")
    return step, n


_TARGET = _parse(os.environ.get(ENV_VAR))
_seen = 0


def checkpoint(step: str) -> None:
    """Mark that the write ``step`` just committed; maybe die here (see module doc)."""
    if _TARGET is None:
        return
    global _seen
    if step != _TARGET[0]:
        return
    _seen += 1
    if _seen == _TARGET[1]:
        os.kill(os.getpid(), signal.SIGKILL)
