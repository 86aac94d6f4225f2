"""UKO URIs and the graph vocabulary.

Every information unit is named by a URI that names its resource::

    uko://<RESOURCE_ULID>                      the resource itself
    uko://<RESOURCE_ULID>/<posix path>         a file inside it
    uko://<RESOURCE_ULID>/<posix path>#L10-L42 a chunk (line range, 1-based, inclusive)
    uko://<RESOURCE_ULID>/<posix path>#sym=Foo.bar   a symbol defined in the file

The authority is the canonical (upper-case) resource ULID, so the owning
resource of any unit can be read from its URI without a lookup.  Path
segments are percent-encoded (RFC 3986) so any file name, including
non-UTF-8 ones decoded with ``surrogateescape``, round-trips.

Graph vocabulary (namespace ``UKO`` = ``https://cleveragents.dev/ns/uko#``),
one named graph per resource ULID.  Literals are plain strings unless marked
``xsd:integer``::

    <resource> uko:contains   <file>          resource contains file
    <file>     uko:inResource <resource>      inverse, so a file's own triples carry it
    <file>     uko:path       "a/b.py"        relative posix path
    <file>     uko:language   "python"
    <file>     uko:hasChunk   <file#L10-L42>
    <chunk>    uko:startLine  10 ; uko:endLine 42          (xsd:integer)
    <file>     uko:defines    <file#sym=Foo.bar>
    <symbol>   uko:name "Foo.bar" ; uko:kind "class" | "function" | "method" | "variable"
    <symbol>   uko:line       12                           (xsd:integer)
    <file>     uko:imports    <file> of the same resource, else <urn:uko:module:NAME>

Code facts from tree-sitter (``code_graph.code_triples``) add::

    <symbol>   uko:endLine 42 ; uko:signature "def f(x)" ; uko:doc "..."
    <symbol>   uko:named      <urn:uko:name:BARE>          the bare name's node
    <class>    uko:hasMember  <symbol>                     a member defined inside it
    <symbol|file> uko:calls   <symbol> of the same file, else <urn:uko:name:CALLEE>
    <symbol|file> uko:callSites "scale:7;square:7,12"     lines of its calls, by callee
    <symbol>   uko:inherits | uko:implements  <symbol> or <urn:uko:name:BASE>

"Who calls X" joins through the name node: ``?caller uko:calls ?t`` where
``?t`` is X's symbol or ``<urn:uko:name:X>`` (which X's ``uko:named``
reaches); the caller's ``uko:callSites`` gives the lines.

Every subject of a file's triples is the file or a URI under it, except the
single ``<resource> uko:contains <file>`` edge, so a file's triples can be
replaced by subject.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from types import MappingProxyType
from urllib.parse import quote, unquote

from cleveragents.domain.models.acms.ulids import canonical_ulid, is_ulid

__all__ = [
    "PREDICATES",
    "SCHEME",
    "UKO",
    "file_uri",
    "module_uri",
    "name_uri",
    "path_of",
    "resource_id_of",
    "resource_uri",
    "unit_uri",
]

SCHEME = "uko://"
UKO = "https://cleveragents.dev/ns/uko#"
#: The vocabulary's predicates above by local name (``PREDICATES["calls"]``),
#: one interned string each: the triples a file yields refer to it rather than
#: carry a copy (~90 bytes a triple in the batches in flight and in the
#: pickles planning workers send).
PREDICATES: Mapping[str, str] = MappingProxyType(
    {
        local: sys.intern(UKO + local)
        for local in (
            "contains", "inResource", "path", "language", "hasChunk", "startLine",
            "endLine", "defines", "name", "kind", "line", "imports", "signature",
            "doc", "named", "hasMember", "calls", "callSites", "inherits", "implements",
        )
    }
)  # fmt: skip
_MODULE_PREFIX = "urn:uko:module:"
_NAME_PREFIX = "urn:uko:name:"


def resource_uri(resource_id: str) -> str:
    """URI of the resource itself."""
    return SCHEME + canonical_ulid(resource_id)


def file_uri(resource_id: str, path: str) -> str:
    """URI of the file at relative posix ``path`` inside the resource."""
    clean = path.strip("/")
    if not clean:
        raise ValueError("a file path must not be empty")
    encoded = quote(clean.encode("utf-8", "surrogateescape"), safe="/-._~")
    return f"{resource_uri(resource_id)}/{encoded}"


def unit_uri(resource_id: str, path: str, fragment: str) -> str:
    """URI of a chunk or symbol of a file, e.g. fragment ``L10-L42``."""
    if not fragment:
        raise ValueError("a unit fragment must not be empty")
    return f"{file_uri(resource_id, path)}#{quote(fragment, safe='-._~=,:')}"


@functools.lru_cache(maxsize=4096)
def name_uri(name: str) -> str:
    """URI of a bare symbol name (``area``): joins the definitions of a name
    (``uko:named``) with the calls and bases that name it, across the files
    of a scope."""
    return _NAME_PREFIX + quote(name, safe="._")


def module_uri(module: str) -> str:
    """URI of an imported module that is not a file of the same resource."""
    return _MODULE_PREFIX + quote(module, safe="._")


def path_of(uri: str) -> str | None:
    """Relative posix path named by a file, chunk or symbol URI, else None."""
    if resource_id_of(uri) is None:
        return None
    rest = uri[len(SCHEME) + 26 :]
    if not rest.startswith("/"):
        return None
    path = rest[1:].split("#", 1)[0]
    return unquote(path, encoding="utf-8", errors="surrogateescape") or None


def resource_id_of(uri: str) -> str | None:
    """Return the canonical resource ULID a UKO URI names, or None.

    None means the URI is not a ``uko://`` URI naming a resource (for
    instance a module URI or a plain IRI).
    """
    if not isinstance(uri, str) or uri[: len(SCHEME)].lower() != SCHEME:
        return None
    authority = uri[len(SCHEME) : len(SCHEME) + 26]
    tail = uri[len(SCHEME) + 26 : len(SCHEME) + 27]
    if tail not in ("", "/", "#") or not is_ulid(authority):
        return None
    return authority.upper()
