"""One writer per data directory: an advisory lock held while indexing.

``fcntl.flock`` on ``<data dir>/reindex.lock``: the kernel releases it when
the holder exits, even on ``SIGKILL``, so a crashed reindex never blocks the
next one.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from cleveragents.domain.models.acms.errors import BusyError, IndexUnavailableError
from cleveragents.infrastructure.acms.file_modes import make_private_dirs

__all__ = ["LOCK_FILE", "ReindexLock", "reindex_running"]

LOCK_FILE = "reindex.lock"


def reindex_running(data_dir: str | os.PathLike[str]) -> bool:
    """Whether a writer holds the data directory's reindex lock now: a
    shared lock tried without waiting and let go at once (nothing created;
    a missing or unreadable lock file is no writer)."""
    try:
        fd = os.open(Path(data_dir) / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing lets the shared lock go
    return False


class ReindexLock:
    """Context manager: hold the data directory's reindex lock.

    Waits up to ``timeout`` seconds (0 = do not wait), then raises
    :class:`BusyError`.
    """

    def __init__(self, data_dir: str | os.PathLike[str], *, timeout: float = 60.0) -> None:
        self.path = Path(data_dir) / LOCK_FILE
        self.timeout = timeout
        self._fd: int | None = None

    def __enter__(self) -> ReindexLock:
        try:
            make_private_dirs(self.path.parent)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise IndexUnavailableError(f"cannot open the lock {self.path}: {exc}") from exc
        deadline = time.monotonic() + self.timeout
        delay = 0.05
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise BusyError(
                        f"another reindex is running on {self.path.parent} "
                        f"(waited {self.timeout:g} s); try again when it has finished"
                    ) from None
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, 1.0)
        self._fd = fd
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
