"""A local listening socket that records connection attempts (shared by the
egress tests): any process that connects lands in its backlog."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def listening_socket() -> Iterator[socket.socket]:
    """A non-blocking TCP socket bound to 127.0.0.1 on a free port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    try:
        yield sock
    finally:
        sock.close()


def accepted(sock: socket.socket) -> int:
    """How many connections arrived since the last call (each is closed)."""
    count = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1
