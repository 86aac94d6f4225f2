"""context_tier_hydrator: fills the context tier service from a project's files.

Without it ``ContextTierService`` starts empty in every process and the model
gets no file context (bug #1028).  The hydrator reads the files of each
resource linked to a plan's projects and stores them as
:class:`TieredFragment` objects in ``ContextTier.HOT``.

Given an ``indexer`` (the container's ``Container.indexer`` in the ``local``
profile), the same single walk also feeds the text, vector and graph indexes
of each resource, incrementally (see :mod:`indexer`).

Limits (from the seed): files over 256 KB are not stored as fragments, and
storing stops when the 10 MB budget is reached: at the first file that would
take the stored bytes past it, no later file is stored (one budget per call:
``hydrate_tiers_for_plan`` shares it among all the plan's resources, in the
order of the projects and their resources); binary extensions and skip
directories are never read.  Neither are secret files (the deny-list of
:mod:`cleveragents.domain.models.acms.secret_filter`, or the resource's own
override from the registry): they are left out of the listing, so they reach
neither the tier nor any index.  A git resource git cannot list (e.g. a
checkout owned by another uid: "dubious ownership") is logged and hydrates
nothing; it is never walked instead, and its indexed units stay as they were.
The tier budget limits fragments only: the index covers every eligible file
up to its own per-file cap (1 MB by default).

Structured log events (structlog, logger ``cleveragents.acms.hydrator``):

====================================== ======= ================================
context_hydrator.skip_missing_location WARNING resource location does not exist
context_hydrator.listing_failed        WARNING git cannot list a git resource
context_hydrator.project_not_found     DEBUG   project not in the repository
context_hydrator.no_linked_resources   DEBUG   project has no linked resources
context_hydrator.resource_not_found    DEBUG   resource not in the registry
context_hydrator.store_failed          DEBUG   a fragment could not be stored
context_hydrator.hydrated              INFO    done: fragments_stored, total_bytes
====================================== ======= ================================
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from cleveragents._collector import paused_collector
from cleveragents._logging import get_logger
from cleveragents.application.services.context_tier_service import ContextTierService
from cleveragents.application.services.indexer import NOT_READ, Indexer, NotRead
from cleveragents.application.services.resource_files import (
    MAX_FILE_BYTES,
    MAX_TOTAL_BYTES,
    ReadFile,
    decode_text,
    is_binary,
    list_resource,
    read_file,
    refuse_swapped_root,
    secret_content,
)
from cleveragents.domain.models.acms.errors import ResourceListingError
from cleveragents.domain.models.acms.secret_filter import (
    DEFAULT_SECRET_FILTER,
    SecretFilter,
    secret_filter_of,
)
from cleveragents.domain.models.acms.tiers import ContextTier, TieredFragment

__all__ = ["hydrate_tiers_for_plan", "hydrate_tiers_from_project"]

_log = get_logger("cleveragents.acms.hydrator")


def hydrate_tiers_for_plan(
    tier_service: ContextTierService,
    project_names: list[str],
    project_repository: Any,  # noqa: ANN401 - the seed's signature: duck-typed collaborators
    resource_registry: Any,  # noqa: ANN401
    *,
    indexer: Indexer | None = None,
) -> int:
    """Hydrate tiers for every resource linked to the plan's projects.

    ``project_repository.get(name)`` returns None or an object with ``.name``
    and ``.resource_ids``; ``resource_registry.get(resource_id)`` returns None
    or an object with ``.resource_id``, ``.location``, ``.resource_type``
    (``Any`` because the container wires them by duck type), and optionally
    ``.secret_filter`` / ``.secret_allow`` (the operator's secret override).

    Returns:
        The total number of fragments stored across all projects.
    """
    total = 0
    budget = _Budget()
    # A resource linked to two of the plan's projects (or a project named
    # twice) is hydrated once: its fragments would be the same, stored twice
    # out of the one budget.
    hydrated: set[str] = set()
    for name in project_names:
        project = project_repository.get(name)
        if project is None:
            _log.debug("context_hydrator.project_not_found", project=name)
            continue
        resource_ids = list(project.resource_ids or ())
        if not resource_ids:
            _log.debug("context_hydrator.no_linked_resources", project=name)
            continue
        for resource_id in resource_ids:
            resource = resource_registry.get(resource_id)
            if resource is None:
                _log.debug(
                    "context_hydrator.resource_not_found", project=name, resource_id=resource_id
                )
                continue
            if resource.resource_id in hydrated:
                _log.debug(
                    "context_hydrator.resource_already_hydrated",
                    project=name,
                    resource_id=resource.resource_id,
                )
                continue
            hydrated.add(resource.resource_id)
            try:
                refuse_swapped_root(resource.location)  # registered resolved
            except ResourceListingError as exc:
                _log.warning(
                    "context_hydrator.listing_failed",
                    project=name,
                    resource_id=resource.resource_id,
                    location=resource.location,
                    error=str(exc),
                )
                continue
            total += _hydrate_resource(
                tier_service,
                name,
                resource.resource_id,
                resource.location,
                resource.resource_type,
                indexer=indexer,
                secrets=secret_filter_of(resource),
                budget=budget,
            )
    return total


def hydrate_tiers_from_project(
    tier_service: ContextTierService,
    project_name: str,
    resource_id: str,
    resource_location: str,
    resource_type: str = "git-checkout",
    *,
    indexer: Indexer | None = None,
    secrets: SecretFilter | None = None,
) -> int:
    """Read one resource's files into ``ContextTier.HOT`` (and its indexes).

    ``secrets`` is the deny-list to apply (None: the default list).

    Returns:
        The number of fragments stored (0 when git cannot list a git resource).
    """
    return _hydrate_resource(
        tier_service,
        project_name,
        resource_id,
        resource_location,
        resource_type,
        indexer=indexer,
        secrets=secrets,
        budget=_Budget(),
    )


class _Budget:
    """The tier's byte budget of one hydration (see the module doc)."""

    __slots__ = ("left", "reached")

    def __init__(self) -> None:
        self.left = MAX_TOTAL_BYTES
        self.reached = False

    def admits(self, size: int) -> bool:
        """Whether ``size`` more bytes fit; the first that do not end storing."""
        if not self.reached and size > self.left:
            self.reached = True
        return not self.reached


def _hydrate_resource(
    tier_service: ContextTierService,
    project_name: str,
    resource_id: str,
    resource_location: str,
    resource_type: str,
    *,
    indexer: Indexer | None,
    secrets: SecretFilter | None,
    budget: _Budget,
) -> int:
    if not os.path.isdir(resource_location):
        _log.warning(
            "context_hydrator.skip_missing_location",
            project=project_name,
            resource_id=resource_id,
            location=resource_location,
        )
        return 0
    try:
        # The data directory inside the resource is never one of its files.
        own = None if indexer is None else indexer.data_dir
        listing = list_resource(
            resource_location,
            resource_type,
            secrets=secrets or DEFAULT_SECRET_FILTER,
            exclude=() if own is None else (own,),
        )
    except ResourceListingError as exc:
        # No session: an empty one would delete the resource's indexed units.
        _log.warning(
            "context_hydrator.listing_failed",
            project=project_name,
            resource_id=resource_id,
            location=resource_location,
            error=str(exc),
        )
        return 0
    listed = listing.files
    secrets = secrets or DEFAULT_SECRET_FILTER
    # The session is a context: a failure part way ends it as a failed one
    # (the dirty marker stays for the next run), never left open holding the
    # resource's writers.  Planned files leave no reference cycles, so the
    # cyclic collector is paused while indexing, as Indexer.index_resource does.
    with contextlib.ExitStack() as stack:
        session = None
        if indexer is not None:
            stack.enter_context(paused_collector())
            session = stack.enter_context(
                indexer.session(
                    resource_id, resource_location, [f.rel_path for f in listed], secrets=secrets
                )
            )
            for _ in listing.secret_skipped:
                session.stats.skip("secret")
            for _path, reason in listing.left_out:
                session.stats.skip(reason)
        stored = 0
        total_bytes = 0
        for f in listed:  # binary extensions and skip directories never get listed
            if session is None and budget.reached:
                break  # nothing left to store, and nothing to index
            # Read while storing goes on; whether it fits is decided once it
            # is known to be a storable file (a binary or secret one that
            # would not fit must not end storing).
            want_tier = f.size <= MAX_FILE_BYTES and not budget.reached
            read: ReadFile | NotRead | None = NOT_READ
            if want_tier or (session is not None and session.needs_read(f)):
                # One read serves both: up to the larger of the two caps.
                cap = max(MAX_FILE_BYTES, indexer.max_file_bytes if indexer else 0)
                read = read_file(resource_location, f, max_bytes=cap)
                if isinstance(read, ReadFile) and secret_content(secrets, f.rel_path, read.data):
                    # Neither stored nor indexed (the session's old units for it go).
                    if session is not None:
                        session.skip(f, "secret")
                    continue
            if session is not None:
                session.visit(f, read)
            if not isinstance(read, ReadFile):
                continue
            data = read.data
            if not want_tier or len(data) > MAX_FILE_BYTES:
                continue
            if is_binary(f.rel_path, data[:8192]) or not budget.admits(len(data)):
                continue
            try:
                tier_service.store(
                    TieredFragment(
                        content=decode_text(data),
                        tier=ContextTier.HOT,
                        metadata={
                            "path": f.rel_path,
                            "detail_depth": "1",
                            "relevance_score": "0.5",
                        },
                    )
                )
            except Exception as exc:
                _log.debug("context_hydrator.store_failed", path=f.rel_path, error=str(exc))
                continue
            stored += 1
            total_bytes += len(data)
            budget.left -= len(data)
    _log.info(
        "context_hydrator.hydrated",
        project=project_name,
        resource_id=resource_id,
        fragments_stored=stored,
        total_bytes=total_bytes,
    )
    return stored
