"""Build the ACMS object graph for an entry point, in one call.

Entry points (the ``acms`` CLI, ``scripts/reindex.py``, ``scripts/quickstart.py``,
agent hosts) call :func:`bootstrap`; services receive what they need and never
import the container themselves (cosmicpython's ``bootstrap.py``)::

    from cleveragents.bootstrap import bootstrap

    acms = bootstrap("/var/lib/acms")              # local engines on disk
    view = acms.view(acms.scope(projects=["local/my-project"]))
    view.search("parseJson", max_results=10)

:func:`private_umask` is for *processes* that own the data directory (the CLI
and scripts call it first thing): every file an engine creates is then
owner-only from its first byte.  A library never changes a host's umask; the
index store narrows what it finds after each write instead.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cleveragents.application.services.operations import AcmsOperations

__all__ = ["bootstrap", "private_umask"]


def bootstrap(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    profile: str = "local",
    embedding_dimension: int | None = None,
) -> AcmsOperations:
    """Operations over ``data_dir`` (default ``$ACMS_DATA_DIR``, else ``./data``).

    Raises:
        ValueError: an unknown profile or a bad embedding dimension.
    """
    from pathlib import Path

    from cleveragents.application.container import build_container
    from cleveragents.application.services.operations import AcmsOperations
    from cleveragents.infrastructure.acms.file_modes import make_private_dirs

    container = build_container(profile, data_dir, embedding_dimension=embedding_dimension)
    # Before the registry or any engine creates it with the process umask.
    make_private_dirs(Path(container.config.data_dir()))
    return AcmsOperations.from_container(container)


def private_umask() -> int:
    """Set the process umask to 0o077 (owner-only files); return the previous one."""
    return os.umask(0o077)
