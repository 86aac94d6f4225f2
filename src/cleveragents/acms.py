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
    projects: Sequence[str] = (),
    resources: Sequence[str] = (),
) -> AgentSession:
    """A session over the real engines of ``data_dir``, scoped to the named
    projects and resources (all registered projects when neither is given).

    Raises:
        NotFoundError: an unknown project or resource.  ValueError: a
        malformed ULID.
    """
    from cleveragents.bootstrap import bootstrap

    return bootstrap(data_dir).agent_session(projects, resources)


if __name__ == "__main__":
    from cleveragents.cli.main import console

    console()
