"""ULID validation and canonical form, and scope validation.

Resource identifiers are ULIDs: 26 characters of Crockford base32.  The
canonical form is upper case; lookups compare canonical forms, so a scope
written in lower case selects the same resources.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["canonical_ulid", "is_ulid", "new_ulid", "validate_scope"]

# Crockford base32 without I, L, O, U; the first character is at most 7 so the
# value fits in 128 bits.
_ULID_RE = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")


def is_ulid(value: object) -> bool:
    """Return True if ``value`` is a string holding a valid ULID (any case)."""
    # ASCII first: str.upper() maps look-alikes such as "ß" to "SS".
    return (
        isinstance(value, str) and value.isascii() and _ULID_RE.fullmatch(value.upper()) is not None
    )


def new_ulid() -> str:
    """A new ULID in canonical form.

    python-ulid is imported on first use: importing it reads the installed
    packages' metadata (~10-20 ms), which a process that only answers
    questions never needs.
    """
    from ulid import ULID

    return str(ULID())


def canonical_ulid(value: object) -> str:
    """Return the canonical (upper-case) form of a ULID.

    Raises:
        TypeError: ``value`` is not a string.
        ValueError: ``value`` is not a valid ULID.
    """
    if not isinstance(value, str):
        raise TypeError(f"a ULID must be a str, not {type(value).__name__}")
    upper = value.upper()
    if not value.isascii() or _ULID_RE.fullmatch(upper) is None:
        raise ValueError(f"not a valid ULID: {value[:64]!r}")
    return upper


def validate_scope(scope: object) -> frozenset[str]:
    """Check a scope and return it in canonical form.

    A scope must be a ``frozenset`` of ULID strings.  An empty scope is valid
    and selects nothing.

    Raises:
        TypeError: ``scope`` is not a frozenset (a str, list or set included),
            or one of its members is not a str.
        ValueError: a member is not a valid ULID.
    """
    if not isinstance(scope, frozenset):
        raise TypeError(f"scope must be a frozenset of ULID strings, not {type(scope).__name__}")
    return frozenset(_canonical_members(scope))


def _canonical_members(members: Iterable[object]) -> Iterable[str]:
    for member in members:
        yield canonical_ulid(member)
