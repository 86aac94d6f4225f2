"""The CLI's last guard: any failure becomes an exit code and one line."""

from __future__ import annotations

import pytest

from cleveragents.cli.main import EXIT_FAILURE, EXIT_USAGE, guarded
from cleveragents.domain.models.acms.errors import (
    IndexUnavailableError,
    QueryError,
    QueryLimitError,
    QueryTimeoutError,
)


class NativePanic(BaseException):
    """Stands in for pyo3's PanicException, which is not an Exception."""


@pytest.mark.parametrize(
    ("error", "code", "prefix"),
    [
        (QueryError("invalid query: x"), EXIT_USAGE, "acms: error: invalid query"),
        (IndexUnavailableError("disk gone"), EXIT_FAILURE, "acms: failed: disk gone"),
        # A server too slow is not the caller's mistake (HTTP: 503); a cap is (400).
        (QueryTimeoutError("no answer within 3 s"), EXIT_FAILURE, "acms: failed: no answer"),
        (QueryLimitError("over 10,000 rows"), EXIT_USAGE, "acms: error: over 10,000 rows"),
        (RuntimeError("boom\nsecond line"), EXIT_FAILURE, "acms: internal error: RuntimeError"),
        (NativePanic("rust panicked"), EXIT_FAILURE, "acms: internal error: NativePanic"),
    ],
)
def test_failures_become_one_line(
    capsys: pytest.CaptureFixture[str], error: BaseException, code: int, prefix: str
) -> None:
    def body() -> int:
        raise error

    assert guarded("acms", body) == code
    err = capsys.readouterr().err
    assert err.startswith(prefix)
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_system_exit_passes_through() -> None:
    def body() -> int:
        raise SystemExit(0)

    with pytest.raises(SystemExit):
        guarded("acms", body)
