"""Milvus adapter for the :class:`~cleveragents.domain.models.acms.backends.VectorIndex` port.

One collection, one row per unit::

    id           VARCHAR(64), primary key   SHA-256 of the unit URI
    resource_id  VARCHAR(26), partition key canonical ULID of the owning resource
    uko_uri      VARCHAR                    the unit URI
    content      VARCHAR                    the unit text
    meta         JSON                       the unit metadata (str -> str)
    vector       FLOAT_VECTOR(dimension)    L2-normalised embedding

Search is cosine (``COSINE`` over rows normalised here) on a ``FLAT`` index:
exact for every scope, however selective, because a graph index (HNSW) with a
selective filter loses recall (see docs/scale-out.md).  The scope is a filter
expression on the partition key, evaluated by the server before ranking, so
out-of-scope rows neither come back nor take a top-k slot.  See
:mod:`.milvus_common` for filters, consistency and errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from cleveragents.domain.models.acms.backends import (
    IndexUnit,
    VectorResult,
    validate_embedding,
    validate_positive_int,
)
from cleveragents.domain.models.acms.ulids import canonical_ulid, validate_scope
from cleveragents.infrastructure.acms.milvus_common import (
    MilvusCollection,
    fit_unit,
    resource_filter,
    scope_filter,
    unit_id,
    uris_of,
)

if TYPE_CHECKING:
    from pymilvus import MilvusClient

__all__ = ["MilvusVectorBackend"]

_OUTPUT = ["uko_uri", "content", "meta"]


def _create(dimension: int) -> Callable[[MilvusClient, str], None]:
    def create(client: MilvusClient, name: str) -> None:
        from pymilvus import DataType

        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
        schema.add_field("resource_id", DataType.VARCHAR, max_length=26, is_partition_key=True)
        schema.add_field("uko_uri", DataType.VARCHAR, max_length=65_535)
        schema.add_field("content", DataType.VARCHAR, max_length=65_535)
        schema.add_field("meta", DataType.JSON)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dimension)
        index = client.prepare_index_params()
        index.add_index(field_name="vector", index_type="FLAT", metric_type="COSINE")
        client.create_collection(
            name, schema=schema, index_params=index, consistency_level="Strong"
        )

    return create


def _check(dimension: int) -> Callable[[dict[str, Any]], None]:
    def check(description: dict[str, Any]) -> None:
        for f in description.get("fields", []):
            if f.get("name") == "vector":
                dim = int(f.get("params", {}).get("dim", -1))
                if dim != dimension:
                    raise ValueError(
                        f"the Milvus collection {description.get('collection_name')} holds "
                        f"{dim}-dimensional vectors; this index expects {dimension}"
                    )
                return
        raise ValueError("the Milvus collection has no 'vector' field; not an ACMS collection")

    return check


class MilvusVectorBackend:
    """A :class:`~cleveragents.domain.models.acms.backends.VectorIndex` on Milvus.

    Args:
        uri: Milvus server address (``http://host:19530``).
        dimension: embedding dimension (positive).
        token: credentials (``user:password`` or API key); never logged.
        collection: collection name.
        timeout: seconds any one server call may take.
        required: whether a read of the collection, missing on the server, is
            an error (something indexed should be there); reads then never
            create it.  None: created when missing, at once (used on its own).

    Raises:
        TypeError / ValueError: invalid arguments, or an existing collection of
            another dimension.
        IndexUnavailableError: the server cannot be reached.
    """

    def __init__(
        self,
        uri: str,
        *,
        dimension: int,
        token: str | None = None,
        collection: str = "acms_vectors",
        timeout: float = 10.0,
        required: Callable[[], bool] | None = None,
    ) -> None:
        self._dimension = validate_positive_int(dimension, "dimension")
        self._coll = MilvusCollection(
            uri=uri,
            token=token,
            collection=collection,
            timeout=timeout,
            create=_create(self._dimension),
            required=required,
            check=_check(self._dimension),
        )

    @property
    def dimension(self) -> int:
        """Embedding dimension of the index."""
        return self._dimension

    def ping(self) -> None:
        """Raise :class:`IndexUnavailableError` while Milvus is unreachable, or
        the collection is missing while something indexed should be in it
        (``acms status``, the image's health check)."""
        self._coll.ping()

    def create_missing(self) -> None:
        """Create the collection if Milvus does not hold it: a writer's first
        step (a read never creates one; see :mod:`.milvus_common`)."""
        self._coll.create_missing()

    def close(self) -> None:
        """Close the client; later calls raise IndexUnavailableError."""
        self._coll.close()

    # ------------------------------------------------------------ read side

    def similarity_search(
        self, embedding: list[float], *, scope: frozenset[str], top_k: int = 20
    ) -> list[VectorResult]:
        """The ``top_k`` in-scope chunks by cosine similarity, exactly.

        ``top_k`` is clamped to Milvus's cap of 16,384.  Scores are cosine
        similarities clamped to 0..1; ties come in URI order.

        Raises:
            TypeError / ValueError: as the Protocol says.
            IndexUnavailableError: the server failed or did not answer in time.
        """
        values = validate_embedding(embedding, self._dimension)
        validate_positive_int(top_k, "top_k")
        canonical = validate_scope(scope)
        query = np.asarray(values, dtype=np.float64)
        norm = float(np.linalg.norm(query))
        if norm == 0.0 or not math.isfinite(norm):
            raise ValueError("embedding must have a non-zero, finite norm")
        if not canonical:
            return []
        q = (query / norm).astype(np.float32).tolist()
        hits = self._coll.search(
            [q],
            "vector",
            limit=top_k,
            expr=scope_filter(canonical),
            metric="COSINE",
            output_fields=_OUTPUT,
        )
        results = [_result(hit) for hit in hits]
        results.sort(key=lambda r: (-r.score, r.uko_uri))
        return results

    # ------------------------------------------------------------ write side

    def upsert(
        self,
        resource_id: str,
        units: Sequence[IndexUnit],
        embeddings: npt.NDArray[np.float32],
        *,
        delete_uris: Iterable[str] = (),
    ) -> None:
        """Delete ``delete_uris``, then add or replace ``units``.

        Milvus has no multi-statement transaction: the deletion and the upsert
        are two server calls, each atomic; a failure between them leaves the
        deletion done (the indexer marks a resource dirty before writing and
        repairs it on the next run).  Every URI and unit must name
        ``resource_id``; all checks run before anything is sent.  Content
        longer than a Milvus VARCHAR (64 KiB) is cut to fit, keeping its start
        (see :func:`.milvus_common.fit_unit`).

        Raises:
            ValueError: wrong shape, non-finite or zero rows, a unit of another
                resource, or a URI longer than a Milvus VARCHAR.
            IndexUnavailableError: the server failed.
        """
        rid = canonical_ulid(resource_id)
        units = list(units)
        doomed = uris_of(rid, delete_uris)
        for unit in units:
            if not isinstance(unit, IndexUnit):
                raise TypeError("units must be IndexUnit values")
            if unit.resource_id != rid:
                raise ValueError(f"unit {unit.uko_uri[:80]!r} does not belong to {rid}")
        matrix = _normalised_rows(embeddings, len(units), self._dimension)
        rows: dict[str, dict[str, Any]] = {}
        for unit, row in zip(units, matrix, strict=True):
            key = unit_id(unit.uko_uri)
            rows[key] = {  # the last duplicate wins
                "id": key,
                "resource_id": rid,
                **fit_unit(unit.uko_uri, unit.content, unit.metadata),
                "vector": row.tolist(),
            }
        stale = {unit_id(u) for u in doomed} - set(rows)
        if stale:
            self._coll.delete_ids(stale)
        self._coll.upsert(list(rows.values()))

    def delete(self, resource_id: str, uris: Iterable[str] | None = None) -> None:
        """Delete the given units of a resource, or all of them when ``uris`` is None."""
        rid = canonical_ulid(resource_id)
        if uris is None:
            self._coll.delete_where(resource_filter(rid))
            return
        doomed = uris_of(rid, uris)
        if doomed:
            self._coll.delete_ids(unit_id(u) for u in doomed)

    def holds_any(self, resource_id: str) -> bool:
        """Whether any unit of the resource is indexed (one row asked for)."""
        return self._coll.any_row(resource_filter(canonical_ulid(resource_id)))

    def unit_uris(self, resource_id: str) -> set[str]:
        """URIs of the units indexed for a resource."""
        rid = canonical_ulid(resource_id)
        return {row["uko_uri"] for row in self._coll.iterate(resource_filter(rid), ["uko_uri"])}

    def resource_ids(self) -> set[str]:
        """ULIDs of the resources with at least one unit (a scan: maintenance only)."""
        return {row["resource_id"] for row in self._coll.iterate('id != ""', ["resource_id"])}


def _normalised_rows(embeddings: object, count: int, dimension: int) -> npt.NDArray[np.float32]:
    matrix = np.asarray(embeddings)
    if matrix.dtype.kind not in "fiu" or matrix.dtype == np.bool_:
        raise ValueError(f"embeddings must be a float array, not dtype {matrix.dtype}")
    if matrix.ndim != 2 or matrix.shape != (count, dimension):
        raise ValueError(
            f"embeddings must have shape ({count}, {dimension}), got {tuple(matrix.shape)}"
        )
    m = matrix.astype(np.float64)
    if not np.isfinite(m).all():
        raise ValueError("embeddings must not contain NaN or infinity")
    norms = np.linalg.norm(m, axis=1)
    if count and (norms == 0).any():
        raise ValueError("an embedding row is all zeros and cannot be normalised")
    return (m / norms[:, None]).astype(np.float32) if count else m.astype(np.float32)


def _result(hit: dict[str, Any]) -> VectorResult:
    entity = hit.get("entity", {})
    meta = entity.get("meta") or {}
    score = float(hit.get("distance", 0.0))
    score = min(1.0, max(0.0, score)) if math.isfinite(score) else 0.0
    return VectorResult(
        uko_uri=str(entity["uko_uri"]),
        content=str(entity.get("content", "")),
        score=score,
        metadata={str(k): str(v) for k, v in meta.items()},
    )
