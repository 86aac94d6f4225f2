"""The public facade for agent hosts, and ``python -m cleveragents.acms``.

One import gives a scoped session with the same operations as the service's
tools (``search``, ``sparql``, ``triples``, ``traverse``, ``read``,
``context``), each answering agent-sized JSON within a character budget::

    from cleveragents.acms import open_data_dir

    session = open_data_dir("/var/lib/acms", projects=["local/my-project"])
    session.search("where is the config parsed", budget=4000)

Run as a module, this is the ``acms`` command line.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cleveragents.application.services.agent_session import AgentSession

__all__ = ["AgentSession", "open_data_dir"]


def __getattr__(name: str) -> Any:  # noqa: ANN401 - the lazily exported class
    # Lazy, so `python -m cleveragents.acms` (the CLI) does not pay for it.
    if name == "AgentSession":
        from cleveragents.application.services.agent_session import AgentSession

        return AgentSession
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_data_dir(
    data_dir: str | os.PathLike[str],
    *,
    projects: str | Sequence[str] = (),
    resources: str | Sequence[str] = (),
    profile: str | None = None,
) -> AgentSession:
    """A session over the real engines of ``data_dir``, scoped to the named
    projects and resources (all registered projects when neither is given).

    ``projects`` and ``resources`` are sequences of names and ULIDs; a single
    string is one name (``projects="local/x"`` is ``projects=["local/x"]``).
    ``profile``: ``local`` (the engines in ``data_dir``) or ``remote`` (the
    servers the environment names, the registry in ``data_dir``); default
    ``$ACMS_PROFILE``, else ``local``.

    The session owns the indexes it opened: close it (``session.close()``,
    or ``with open_data_dir(...) as session:``) when done with it; a session
    no longer referenced releases them too.

    Raises:
        NotFoundError: an unknown project or resource; a data directory that
        does not exist, or (with neither ``projects`` nor ``resources``) that
        registers no project: a mistyped path would otherwise be made, empty,
        and every answer would be nothing (``acms serve`` refuses it too).
        ValueError: a malformed ULID, or an unknown profile.  TypeError: a
        name that is not a string.
    """
    from cleveragents.bootstrap import bootstrap
    from cleveragents.domain.models.acms.errors import NotFoundError

    names = _names("projects", projects)
    ulids = _names("resources", resources)
    where = os.path.abspath(os.path.expanduser(os.fspath(data_dir)))
    if not os.path.isdir(where):
        raise NotFoundError(
            f"no data directory at {where}: give the one `acms` indexed into "
            "(its --data-dir, or ACMS_DATA_DIR)"
        )
    from cleveragents.infrastructure.acms.index_store import REGISTRY_FILE

    registered = os.path.exists(os.path.join(where, REGISTRY_FILE))
    ops = None if not registered else bootstrap(where, profile=profile)
    if ops is None or (not names and not ulids and not ops.list_projects()):
        # (Checked before opening: opening makes the registry, a file left
        # behind by a call that refuses.)
        if ops is not None:
            ops.close()
        raise NotFoundError(
            f"the data directory {where} registers no project: register and index one "
            "(`acms project add`, `acms resource add`, `acms reindex`), or give the data "
            "directory that holds yours"
        )
    session = ops.agent_session(names, ulids, owned=True)
    # The session owns its indexes: ``close()`` (or a with-block) releases
    # their files and locks, and so does dropping the last reference to it.
    weakref.finalize(session, ops.close)
    return session


def _names(argument: str, given: str | Sequence[str]) -> list[str]:
    """``given`` as a list of names: a string is one name, not its characters."""
    if isinstance(given, str):
        return [given]
    if isinstance(given, bytes | bytearray) or not isinstance(given, Sequence | frozenset | set):
        raise TypeError(f"{argument} must be a name or a list of names, not {type(given).__name__}")
    names = list(given)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(
                f"{argument} must hold names (str), not {type(name).__name__}: {name!r}"
            )
    return names


if __name__ == "__main__":
    from cleveragents.cli.main import console

    console()
