"""Build the ACMS object graph for an entry point, in one call.

Entry points (the ``acms`` CLI, ``scripts/reindex.py``, ``scripts/quickstart.py``,
agent hosts) call :func:`bootstrap`; services receive what they need and never
import the container themselves (cosmicpython's ``bootstrap.py``)::

    from cleveragents.bootstrap import bootstrap

    acms = bootstrap("/var/lib/acms")              # $ACMS_PROFILE, else local engines on disk
    view = acms.view(acms.scope(projects=["local/my-project"]))
    view.search("parseJson", max_results=10)

Every entry point takes its profile from :func:`entry_profile`: an explicit
choice (an entry point's ``--profile``), else ``$ACMS_PROFILE``, else
``local``; an unknown name, or ``stub`` (in-memory stubs with nothing to
index or query), is refused with a ``ValueError`` naming the valid ones.

:func:`private_umask` is for *processes* that own the data directory (the CLI
and scripts call it first thing): every file an engine creates is then
owner-only from its first byte.  A library never changes a host's umask; the
index store narrows what it finds after each write instead.

:func:`lean_container_import` is for processes too: it imports
dependency-injector without the integrations this package never uses.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType

    from cleveragents.application.services.operations import AcmsOperations

__all__ = [
    "ENTRY_PROFILES",
    "UNUSED_INTEGRATIONS",
    "bootstrap",
    "entry_profile",
    "lean_container_import",
    "private_umask",
]

#: The profiles an entry point can run: ``stub`` (the container's in-memory
#: stubs, for tests) has no index store and answers every query with nothing.
ENTRY_PROFILES = ("local", "remote")

# What dependency-injector imports, when installed, for features this package
# does not use: YAML and pydantic configuration, and wiring into web
# frameworks.  pydantic and Starlette are installed (the MCP service needs
# them), so every command paid ~50 ms to import them.
UNUSED_INTEGRATIONS = frozenset(
    {"fastapi", "flask", "pydantic", "pydantic_settings", "starlette", "werkzeug", "yaml"}
)


def entry_profile(explicit: str | None = None) -> str:
    """The profile an entry point runs: ``explicit`` (its ``--profile``
    option), else ``$ACMS_PROFILE``, else ``local``.

    Raises:
        ValueError: an unknown profile, or ``stub`` (nothing to index or
            query), naming where it came from and the valid profiles.
    """
    source = "--profile" if explicit else "ACMS_PROFILE"
    profile = explicit or os.environ.get("ACMS_PROFILE") or "local"
    if profile == "stub":
        raise ValueError(
            f"{source}=stub has no indexes (in-memory stubs, for tests); "
            f"use one of {', '.join(ENTRY_PROFILES)}"
        )
    if profile not in ENTRY_PROFILES:
        raise ValueError(
            f"unknown {source} {profile!r}; expected one of {', '.join(ENTRY_PROFILES)}"
        )
    return profile


def bootstrap(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    profile: str | None = None,
    embedding_dimension: int | None = None,
) -> AcmsOperations:
    """Operations over ``data_dir`` (default ``$ACMS_DATA_DIR``, else ``./data``)
    with the engines of ``profile`` (default ``$ACMS_PROFILE``, else ``local``;
    see :func:`entry_profile`).  ``remote`` keeps the registry and the catalog
    in ``data_dir`` and the indexes on the servers the environment names.

    Raises:
        ValueError: an unknown profile, ``stub``, a remote profile the
            environment does not configure, or a bad embedding dimension.
    """
    from pathlib import Path

    from cleveragents.application.container import build_container
    from cleveragents.application.services.operations import AcmsOperations
    from cleveragents.infrastructure.acms.file_modes import make_private_dirs

    profile = entry_profile(profile)
    container = build_container(profile, data_dir, embedding_dimension=embedding_dimension)
    # Before the registry or any engine creates it with the process umask.
    make_private_dirs(Path(container.config.data_dir()))
    return AcmsOperations.from_container(container)


class _Unused:
    """A meta path finder that answers "not installed" for the unused integrations."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname.partition(".")[0] in UNUSED_INTEGRATIONS:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def lean_container_import() -> None:
    """Import dependency-injector as if :data:`UNUSED_INTEGRATIONS` were not
    installed (its optional imports are guarded: it then leaves those
    features off).  Those packages import normally afterwards, for whatever
    else needs them (the MCP service).

    For entry points only: a host may use those features of
    dependency-injector itself.  Does nothing once dependency-injector is
    imported; an integration imported before it stays visible to it.
    """
    if "dependency_injector.containers" in sys.modules:
        return
    finder = _Unused()
    sys.meta_path.insert(0, finder)
    try:
        import dependency_injector.containers
        import dependency_injector.providers  # noqa: F401
    except Exception:
        # Not installed, or broken: building the container imports it again,
        # inside the entry point's error handling, which reports it in one line.
        pass
    finally:
        sys.meta_path.remove(finder)


def private_umask() -> int:
    """Set the process umask to 0o077 (owner-only files); return the previous one."""
    return os.umask(0o077)
