"""``acms serve --http`` in a subprocess on a free loopback port (shared by
the service's end-to-end tests): its stderr (JSON log lines) kept in a file."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from remote_servers import free_port

SERVE = [sys.executable, "-m", "cleveragents.cli.serve"]


class HttpServer:
    """The server, started with ``args`` (scope, log level) and answering
    ``/api/status`` before the constructor returns."""

    def __init__(
        self,
        env: dict[str, str],
        log: Path,
        *args: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._errors = log.open("wb")
        self.proc = subprocess.Popen(
            [*SERVE, "--http", f"127.0.0.1:{self.port}", *args],
            stdout=subprocess.PIPE,
            stderr=self._errors,
            env=env,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                answer = httpx.post(f"{self.base}/api/status", headers=headers, timeout=2)
                if answer.status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        self.stop()
        pytest.fail(f"server did not start: {log.read_text()}")

    def records(self) -> list[dict[str, Any]]:
        """The log lines written so far (each must be JSON)."""
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def stop(self) -> bytes:
        """Stop the server; what it wrote on stdout."""
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=20)
        self._errors.close()
        return out
