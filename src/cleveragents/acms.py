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
import sys
from collections.abc import Sequence

from cleveragents.application.services.agent_session import AgentSession, SessionScope
from cleveragents.domain.models.acms.errors import IndexUnavailableError, ScopeError

__all__ = ["AgentSession", "open_data_dir"]


def open_data_dir(
    data_dir: str | os.PathLike[str],
    *,
    projects: Sequence[str] = (),
    resources: Sequence[str] = (),
) -> AgentSession:
    """A session over the real engines of ``data_dir``, scoped to the named
    projects and resources (all registered projects when neither is given).

    Raises:
        ScopeError: an unknown project or resource.
    """
    from cleveragents.application.container import build_container
    from cleveragents.application.services.resource_files import (
        ListedFile,
        decode_text,
        read_file,
    )
    from cleveragents.domain.models.acms.ulids import canonical_ulid

    container = build_container("local", data_dir)
    repo = container.project_repository()
    registry = container.resource_registry()
    if projects:
        chosen_projects = list(projects)
    else:
        chosen_projects = [] if resources else [p.name for p in repo.list()]
    by_project: dict[str, frozenset[str]] = {}
    for name in chosen_projects:
        project = repo.get(name)
        if project is None:
            raise ScopeError(f"unknown project {name!r}")
        by_project[name] = frozenset(project.resource_ids)
    rids: set[str] = set().union(*by_project.values()) if by_project else set()
    for rid in resources:
        try:
            canonical = canonical_ulid(rid)
        except (TypeError, ValueError):
            raise ScopeError(f"{rid!r} is not a resource ULID") from None
        if registry.get(canonical) is None:
            raise ScopeError(f"unknown resource {canonical}")
        rids.add(canonical)
    scope = SessionScope(resources=frozenset(rids), projects=by_project)

    def read(rid: str, path: str, max_bytes: int) -> str | None:
        resource = registry.get(rid)
        if resource is None:
            return None
        got = read_file(resource.location, ListedFile(path, 0, 0), max_bytes=max_bytes)
        return None if got is None else decode_text(got.data)

    embedder = container.embedder()
    if embedder is None:
        raise IndexUnavailableError("the data directory has no embedder configured")
    return AgentSession(
        text=container.text_backend(),
        vector=container.vector_backend(),
        graph=container.graph_backend(),
        embedder=embedder,
        scope=scope,
        read_file=read,
    )


if __name__ == "__main__":
    from cleveragents.cli.main import main

    sys.exit(main())
