"""The service's listening socket: connections accepted from it have Nagle's
algorithm off, so a kept-alive HTTP client does not wait for a delayed ACK
between a response's headers and its body (~44 ms a call before)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from cleveragents.cli.serve import _listen


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_accepted_connections_have_nagle_off(host: str) -> None:
    try:
        listener = _listen(host, 0)
    except OSError as exc:  # no IPv6 on this host
        pytest.skip(f"cannot listen on {host}: {exc}")
    port = listener.getsockname()[1]
    seen: list[int] = []

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    async def run() -> None:
        server = await asyncio.get_running_loop().create_server(Probe, sock=listener)
        async with server:
            _, writer = await asyncio.open_connection(host, port)
            for _ in range(100):
                if seen:
                    break
                await asyncio.sleep(0.01)
            writer.close()

    asyncio.run(run())
    assert listener.proto == socket.IPPROTO_TCP
    assert seen and seen[0] != 0
