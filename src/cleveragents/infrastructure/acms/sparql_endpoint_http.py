"""A bounded HTTP client for SPARQL endpoints: every answer is read under a
deadline and a byte cap, and every failure becomes an ACMS error.

Server-side timeouts are not reliable across endpoints (and a hostile or
broken endpoint may stream forever), so the limits are enforced here:

- ``timeout`` seconds for connecting, each read and each write, and an
  overall deadline of ``timeout`` checked after every chunk received: a call
  ends within about twice ``timeout`` however the server behaves;
- ``max_bytes`` of (decompressed) body: one byte more aborts the read.

Redirects are not followed and proxy settings from the environment are
ignored: the client talks only to the configured URL.  Credentials go in an
``Authorization`` header and never into a URL, a message or a log event
(httpx logs every request's URL at INFO, so a URL with user info is refused).

Only a 2xx answer is a success.  A redirect or a 404 is a configuration
problem (a moved or mistyped endpoint), never "nothing there": taking it for
success would drop a write silently, so every status is an error naming it
and the server's address.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx

from cleveragents.domain.models.acms.errors import (
    IndexUnavailableError,
    QueryLimitError,
)

__all__ = ["BoundedHttp", "HttpAnswer"]

_MESSAGE_CHARS = 300
# What a server answers to a request it cannot take: the caller's fault when
# the request is the caller's query (``on_refused``), ours otherwise.
_REFUSED = frozenset({400, 413, 414, 422})


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """A complete response: status, content type and body."""

    status: int
    content_type: str
    body: bytes


class BoundedHttp:
    """One ``httpx.Client`` with the limits above.

    Args:
        timeout: seconds (positive).
        user / password: HTTP basic credentials, both or neither.
    """

    def __init__(self, *, timeout: float, user: str | None, password: str | None) -> None:
        if (user is None) != (password is None):
            raise ValueError("give both a SPARQL user and a password, or neither")
        auth = None
        if user is not None and password is not None:
            auth = httpx.BasicAuth(user, password)
        self._timeout = timeout
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout),
            auth=auth,
            follow_redirects=False,
            trust_env=False,
        )

    def close(self) -> None:
        self._client.close()

    def request(
        self,
        method: str,
        url: str,
        *,
        what: str,
        max_bytes: int,
        timeout: float | None = None,
        params: Mapping[str, str] | None = None,
        form: Sequence[tuple[str, str]] | None = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        on_timeout: type[Exception] = IndexUnavailableError,
        on_refused: type[Exception] = IndexUnavailableError,
    ) -> HttpAnswer:
        """Send one request and read the whole answer within the limits.

        ``what`` names the call in errors, with the server's address (never
        its credentials).  Only a 2xx answer is returned.  A 400, 413, 414
        or 422 (the server cannot take the request) raises ``on_refused``
        with the server's message (a :class:`QueryError` when the request is
        the caller's query); every other status (a redirect, 401/403, 404,
        405, 5xx), a refused or dropped connection is
        :class:`IndexUnavailableError`; running out of time raises
        ``on_timeout``; a body over ``max_bytes`` is a :class:`QueryLimitError`.

        Raises:
            ValueError: ``url`` holds user info (credentials go to the constructor).
        """
        if httpx.URL(url).userinfo:
            raise ValueError("a SPARQL endpoint URL must not hold credentials")
        limit = self._timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        body = bytearray()
        # Every failure names the server: with three endpoints configured, an
        # error that does not say which one leaves the operator guessing.
        where = f"{what} at {_address(url)}"
        try:
            with self._client.stream(
                method,
                url,
                params=params,
                data=dict_list(form) if form is not None else None,
                content=content,
                headers=headers,
                timeout=httpx.Timeout(limit),
            ) as response:
                # Chunks as received: a buffered read would keep a drip from the deadline.
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        raise QueryLimitError(
                            f"{where}: the answer is larger than the cap of {max_bytes} bytes"
                        )
                    if time.monotonic() > deadline:
                        raise on_timeout(f"{where}: no complete answer within {limit:g} s")
                status = response.status_code
                content_type = response.headers.get("content-type", "")
        except httpx.TimeoutException as exc:
            raise on_timeout(f"{where}: no complete answer within {limit:g} s") from exc
        except httpx.HTTPError as exc:
            raise IndexUnavailableError(
                f"{where}: the SPARQL endpoint cannot be reached ({type(exc).__name__})"
            ) from exc
        if time.monotonic() > deadline:
            raise on_timeout(f"{where}: no complete answer within {limit:g} s")
        if 200 <= status < 300:
            return HttpAnswer(status, content_type.split(";")[0].strip().lower(), bytes(body))
        if status in (401, 403):
            raise IndexUnavailableError(
                f"{where}: the SPARQL endpoint refused the credentials ({status})"
            )
        if 300 <= status < 400:
            raise IndexUnavailableError(
                f"{where}: the SPARQL endpoint redirects ({status}); configure the address "
                "it redirects to (redirects are not followed)"
            )
        if status in _REFUSED:
            raise on_refused(f"{where}: the SPARQL endpoint refused it ({status}): {_text(body)}")
        if status >= 500:
            raise IndexUnavailableError(
                f"{where}: the SPARQL endpoint failed ({status}): {_text(body)}"
            )
        raise IndexUnavailableError(
            f"{where}: the SPARQL endpoint answered {status}; check the configured URL: "
            f"{_text(body)}"
        )


def dict_list(form: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """Form fields with repeats (``default-graph-uri`` once per graph)."""
    out: dict[str, list[str]] = {}
    for key, value in form:
        out.setdefault(key, []).append(value)
    return out


def _address(url: str) -> str:
    """Scheme, host, port and path: what names the server in a message."""
    u = httpx.URL(url)
    return f"{u.scheme}://{u.netloc.decode('ascii')}{u.path}"


def _text(body: bytes | bytearray) -> str:
    return bytes(body[:_MESSAGE_CHARS]).decode("utf-8", "replace").strip()
