"""List and read a resource's files without trusting the tree.

A resource is a directory or a git checkout that somebody else controls. Its
files are read into an LLM context tier and into search indexes, so this module
assumes the tree is hostile:

* committed symlinks (to ``/etc/passwd``, ``/dev/zero``, a directory outside the
  root, or themselves) are never followed, neither at listing nor at reading;
* FIFOs, sockets and device nodes are never read, and opening them never blocks;
* a file or a directory component swapped for a symlink between listing and
  reading is refused: reading walks from the root's descriptor with
  ``openat``-style ``dir_fd`` calls, every component opened ``O_NOFOLLOW``;
* sizes are enforced on bytes actually read, never on ``st_size`` alone;
* non-UTF-8 names survive as surrogate escapes (``os.fsdecode``).

Listing uses ``git ls-files`` for git resources (so ``.gitignore`` applies) and
``os.walk`` for plain directories.  :func:`git_ignored_work_tree` tells when
the first lists nothing where the second would list files (a directory its
work tree ignores entirely).  When git cannot list a git resource
(missing, timed out, or refusing the checkout, e.g. "dubious ownership" when
the checkout's owner is not the indexer's uid), listing raises
:class:`ResourceListingError` naming git's reason and the fix: walking the
tree instead would read what ``.gitignore`` keeps out.

A directory passed in ``exclude`` (the data directory, when it sits inside
the resource it indexes, as ``./data`` does in a checkout) is never listed:
indexing the indexes' own files would find them changed at every run.

Before anything is looked at, each path goes through the secret deny-list
(:mod:`cleveragents.domain.models.acms.secret_filter`): a secret file is never
``lstat``-ed, read, stored or indexed.  Every file that is left out is logged as
``context_hydrator.file_skipped`` with ``path`` and ``reason`` (DEBUG; INFO
for ``reason="secret"``, with the matching ``rule``).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import shlex
import stat
import subprocess
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from cleveragents._logging import get_logger
from cleveragents.domain.models.acms.errors import ResourceListingError
from cleveragents.domain.models.acms.secret_filter import (
    DEFAULT_SECRET_FILTER,
    SecretFilter,
    SecretRule,
)

__all__ = [
    "BINARY_EXTENSIONS",
    "GIT_TIMEOUT_SECONDS",
    "MAX_FILE_BYTES",
    "MAX_TOTAL_BYTES",
    "SKIP_DIRS",
    "ListedFile",
    "Listing",
    "ReadFile",
    "decode_text",
    "excluded_below",
    "git_directory_of",
    "git_ignored_work_tree",
    "is_binary",
    "list_files",
    "list_resource",
    "read_file",
    "refuse_swapped_root",
    "secret_content",
]

_log = get_logger("cleveragents.acms.hydrator")

MAX_FILE_BYTES = 256 * 1024
"""Files larger than this are not read."""

MAX_TOTAL_BYTES = 10 * 1024 * 1024
"""Hydration budget across one resource; enforced by the caller."""

GIT_TIMEOUT_SECONDS = 30.0
"""How long ``git ls-files`` may run before listing fails."""

_SNIFF_BYTES = 8192

BINARY_EXTENSIONS: frozenset[str] = frozenset(
    {
        # compiled code and libraries
        ".pyc", ".pyo", ".pyd", ".so", ".dll", ".dylib", ".exe", ".bin", ".o", ".a",
        ".obj", ".lib", ".class", ".jar", ".war", ".wasm",
        # images
        ".png", ".jpg", ".jpeg", ".gif", ".bmp", ".ico", ".webp", ".tiff", ".tif",
        ".psd", ".icns",
        # documents
        ".pdf", ".doc", ".docx", ".xls", ".xlsx", ".ppt", ".pptx", ".odt",
        # archives and packages
        ".zip", ".gz", ".tgz", ".bz2", ".xz", ".7z", ".tar", ".rar", ".zst", ".lz4",
        ".whl", ".egg", ".deb", ".rpm", ".dmg", ".iso", ".apk",
        # media
        ".mp3", ".mp4", ".wav", ".avi", ".mov", ".mkv", ".flac", ".ogg", ".webm",
        # fonts
        ".woff", ".woff2", ".ttf", ".otf", ".eot",
        # data stores and serialised arrays
        ".sqlite", ".sqlite3", ".db", ".pkl", ".pickle", ".npy", ".npz", ".parquet",
        # vim's swap files, rewritten every few seconds while a file is edited
        ".swp", ".swo", ".swx",
        ".h5", ".hdf5", ".onnx", ".pt", ".pth", ".safetensors",
    }
)  # fmt: skip
"""Lower-case extensions (with the dot) that are never read as text."""

SKIP_DIRS: frozenset[str] = frozenset(
    {
        ".git", ".hg", ".svn",
        "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis",
        ".tox", ".eggs", "site-packages",
        "node_modules",
        ".venv", "venv", "env", ".env",
        "dist", "build", "target",
        ".idea", ".vscode",
    }
)  # fmt: skip
"""Directory names that are never descended into, wherever they appear."""

_VCS_DIRS = frozenset({".git", ".hg", ".svn"})
_OBJECT_NAME = re.compile(rb"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1 or SHA-256

_GIT_TYPES = frozenset({"git-checkout", "git"})

# Variables that would point git at another repository than ``-C root``
# (set, for instance, while a git hook runs).
_GIT_REDIRECT_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_READ_CHUNK = 64 * 1024
# Directories opened only to ``fstatat`` beneath them: no read permission needed.
_PATH_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class ListedFile(NamedTuple):
    """A regular file found under a resource root (from ``lstat``; nothing read).

    A named tuple, not a dataclass: a re-run lists every file of every
    resource, and a tuple is built (and sorted by path) in half the time.

    Attributes:
        rel_path: POSIX path relative to the root; undecodable bytes are kept
            as surrogate escapes (``os.fsdecode``).
        size: Size in bytes at listing time.
        mtime_ns: Modification time at listing time, in nanoseconds.
    """

    rel_path: str
    size: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class Listing:
    """What listing a resource found.

    Attributes:
        files: The regular files to consider, sorted by path.
        secret_skipped: ``(path, rule pattern)`` of each file the secret
            deny-list left out, sorted by path; none of them was looked at.
        left_out: ``(path, reason)`` of each other file left out by what it
            is, sorted: ``"symlink"`` (never followed), ``"binary"`` (by its
            extension, never looked at) or ``"not_regular"`` (a FIFO, socket
            or device), ``"unreadable"`` (its ``lstat`` was refused), and
            each directory under the root that cannot be listed,
            ``"unreadable_directory"``; a reindex counts them as skipped
            and warns of the unreadable ones.
    """

    files: tuple[ListedFile, ...]
    secret_skipped: tuple[tuple[str, str], ...] = ()
    left_out: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ReadFile:
    """The bytes of one file, with the size and mtime of what was read."""

    rel_path: str
    data: bytes
    size: int
    mtime_ns: int


def _skip(path: str, reason: str, **fields: object) -> None:
    _log.debug("context_hydrator.file_skipped", path=path, reason=reason, **fields)


def _is_git_directory(fd: int) -> bool:
    """Whether the open directory ``fd`` is a repository's own directory (a
    ``.git`` under another name, a bare clone such as ``mirror.git``): it
    holds a ``HEAD`` file and ``objects`` and ``refs`` directories, as git
    itself recognises one (``HEAD`` a symbolic ref or an object name).  Its
    files are git's objects, refs and config (remote URLs with credentials
    among them), never a project's files."""
    try:
        if not stat.S_ISREG(os.stat("HEAD", dir_fd=fd, follow_symlinks=False).st_mode):
            return False
        if not all(
            stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
            for name in ("objects", "refs")
        ):
            return False
        head_fd = os.open("HEAD", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
        try:
            head = os.read(head_fd, 128).strip()
        finally:
            os.close(head_fd)
    except OSError:
        return False
    return head.startswith(b"ref: refs/") or _OBJECT_NAME.fullmatch(head) is not None


def git_directory_of(path: str | os.PathLike[str]) -> str | None:
    """The git repository directory that ``path`` is or lies inside (a
    ``.git`` component, or a directory that :func:`_is_git_directory`
    recognises, bare clones included), resolved; None for any other path."""
    real = Path(os.path.realpath(os.fspath(path)))
    for candidate in (real, *real.parents):
        if candidate.name in _VCS_DIRS:
            return str(candidate)
        try:
            fd = os.open(candidate, _PATH_FLAGS)
        except OSError:
            continue
        try:
            if _is_git_directory(fd):
                return str(candidate)
            with contextlib.suppress(FileNotFoundError):
                # A work tree's root (a .git directory or file in it): what
                # lies above is not this path's repository, even a bare
                # clone whose linked work tree it is (found in a read-back).
                os.stat(".git", dir_fd=fd, follow_symlinks=False)
                return None
        finally:
            os.close(fd)
    return None


def _split_safe(rel_path: str) -> list[str] | None:
    """Return the components of a relative path, or None if it could leave the root."""
    if not rel_path or rel_path.startswith("/") or "\0" in rel_path:
        return None
    parts = rel_path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    return parts


def _extension(rel_path: str) -> str:
    dot = rel_path.rfind(".")
    if dot < 0 or "/" in rel_path[dot:]:
        return ""
    return rel_path[dot:].lower()


def is_binary(rel_path: str, head: bytes) -> bool:
    """Tell whether a file should be treated as binary.

    Args:
        rel_path: The file's path; its extension is compared case-insensitively
            with ``BINARY_EXTENSIONS``.
        head: The file's first bytes (any length; only the first 8192 are looked at).

    Returns:
        True if the extension is a binary one or ``head`` holds a NUL byte.
    """
    return _extension(rel_path) in BINARY_EXTENSIONS or b"\0" in head[:_SNIFF_BYTES]


def secret_content(secrets: SecretFilter, rel_path: str, data: bytes) -> bool:
    """True (and logged) when ``data`` holds a high-confidence secret token.

    The file must then be neither stored nor indexed; see
    :meth:`SecretFilter.content_rule`.
    """
    kind = secrets.content_rule(rel_path, data)
    if kind is None:
        return False
    _log.info("context_hydrator.file_skipped", path=rel_path, reason="secret_content", kind=kind)
    return True


def decode_text(data: bytes) -> str:
    """Decode file bytes as UTF-8, dropping a leading BOM and replacing bad bytes."""
    return data.decode("utf-8-sig", errors="replace")


_DIRECTORY_HINT = "or register it with '--type directory' to index every file, .gitignore ignored"


def _git_failed(root: str, reason: str, detail: str, fix: str) -> ResourceListingError:
    _log.debug("context_hydrator.git_failed", root=root, reason=reason, detail=detail, fix=fix)
    return ResourceListingError(f"git cannot list {root}: {detail} (fix: {fix})")


def _git_env() -> dict[str, str]:
    """This environment without what would point git at another repository."""
    env = {k: v for k, v in os.environ.items() if k not in _GIT_REDIRECT_VARS}
    env["GIT_OPTIONAL_LOCKS"] = "0"
    return env


def _git_paths(root: str) -> list[str]:
    """Return the paths ``git ls-files`` lists under ``root``.

    Raises:
        ResourceListingError: git is missing, timed out or failed; the message
            gives git's reason and the fix.
    """
    env = _git_env()
    command = [
        "git",
        # A checkout's own config could name an fsmonitor command for git to run.
        "-c",
        "core.fsmonitor=false",
        "-C",
        root,
        "ls-files",
        "-z",
        "--cached",
        "--others",
        "--exclude-standard",
    ]
    try:
        completed = subprocess.run(  # fixed argv, no shell
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=env,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except FileNotFoundError:
        raise _git_failed(
            root, "git_missing", "git is not installed", f"install git, {_DIRECTORY_HINT}"
        ) from None
    except subprocess.TimeoutExpired:
        raise _git_failed(
            root,
            "timeout",
            f"git ls-files did not finish within {GIT_TIMEOUT_SECONDS:g} s",
            f"check the checkout with 'git status', {_DIRECTORY_HINT}",
        ) from None
    except OSError as exc:
        raise _git_failed(
            root, "os_error", f"cannot run git: {exc}", f"check git, {_DIRECTORY_HINT}"
        ) from exc
    if completed.returncode != 0:
        stderr = completed.stderr.decode("utf-8", errors="replace")
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        first = next((line for line in lines if line.startswith("fatal:")), None)
        detail = first or (lines[0] if lines else f"exit status {completed.returncode}")
        detail = detail.removeprefix("fatal:").strip()[:300]
        if "dubious ownership" in stderr:
            # The checkout belongs to another uid (typical in a container).
            reason = "dubious_ownership"
            fix = f"git config --global --add safe.directory {shlex.quote(root)}"
        else:
            reason = "git_failed"
            fix = f"make it a readable git checkout, {_DIRECTORY_HINT}"
        raise _git_failed(root, reason, detail, fix)
    # An untracked nested repository is listed as "name/"; lstat rejects it later.
    return [
        os.fsdecode(raw).rstrip("/") for raw in completed.stdout.split(b"\0") if raw.strip(b"/")
    ]


def _listed(
    root: str,
    candidates: Iterable[str],
    secrets: SecretFilter,
    secret_skipped: list[tuple[str, str]],
    left_out: list[tuple[str, str]] | None = None,
) -> Generator[ListedFile, None, None]:
    """``lstat`` each candidate through an ``O_NOFOLLOW`` chain of directory descriptors.

    Candidates are visited in sorted order, so the files of one directory
    come together (every path sharing a prefix is contiguous): each directory
    is opened once, ``O_DIRECTORY | O_NOFOLLOW`` relative to its parent's
    descriptor, and each file is ``fstatat``-ed relative to its directory's,
    never following a link.  A directory component that is a symlink (or
    not a directory) cannot be opened, so nothing under it is listed.  A path
    the secret filter denies is appended to ``secret_skipped`` before
    anything of it is looked at; a symlink, a binary by its extension or a
    file that is not a regular one to ``left_out``, with its reason.
    """
    paths = sorted(set(candidates))
    if not paths:
        return
    root_fd = _open_root(root)
    names: list[str] = []  # the directory components currently open
    fds: list[int] = [root_fd]
    current: str | None = ""  # the directory of the previous candidate
    dir_fd: int | None = root_fd  # its descriptor, None when it is refused
    dir_reason = ""
    rule_for, lstat = secrets.rule_for, os.stat
    try:
        for rel_path in paths:
            directory, _, name = rel_path.rpartition("/")
            if directory != current:
                current = directory
                dir_fd, dir_reason = _open_directory(directory, names, fds)
            if dir_reason and dir_reason != "symlink":
                _skip(rel_path, dir_reason)
                continue
            if name in ("", ".", "..") or "\0" in name or rel_path.startswith("/"):
                _skip(rel_path, "outside_root")
                continue
            if _excluded(rel_path, name, rule_for, secret_skipped, left_out):
                continue
            if dir_fd is None:
                _skip(rel_path, dir_reason)
                continue
            found = _regular_file(
                rel_path,
                functools.partial(lstat, name, dir_fd=dir_fd, follow_symlinks=False),
                left_out,
            )
            if found is not None:
                yield found
    finally:
        for fd in fds:
            os.close(fd)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _excluded(
    rel_path: str,
    name: str,
    rule_for: Callable[[str], SecretRule | None],
    secret_skipped: list[tuple[str, str]],
    left_out: list[tuple[str, str]] | None = None,
) -> bool:
    """Whether a listed file is left out: a binary by its extension (skip
    logged, and recorded in ``left_out``), or a path the secret filter
    denies (recorded in ``secret_skipped``)."""
    dot = name.rfind(".")
    if dot >= 0 and name[dot:].lower() in BINARY_EXTENSIONS:
        _skip(rel_path, "binary")
        if left_out is not None:
            left_out.append((rel_path, "binary"))
        return True
    secret = rule_for(rel_path)
    if secret is None:
        return False
    _log.info(
        "context_hydrator.file_skipped",
        path=rel_path,
        reason="secret",
        rule=secret.pattern,
        why=secret.reason,
    )
    secret_skipped.append((rel_path, secret.pattern))
    return True


def _regular_file(
    rel_path: str,
    stat_of: Callable[[], os.stat_result],
    left_out: list[tuple[str, str]] | None = None,
) -> ListedFile | None:
    """``rel_path`` as listed when ``stat_of()`` (which never follows a link)
    shows a regular file; else None, the skip logged (vanished, unreadable,
    a symlink or not a regular file, these two then appended to ``left_out``
    with their reason: the ``lstat`` already says what the file is)."""
    try:
        st = stat_of()
    except FileNotFoundError:
        _log.debug("context_hydrator.vanished", path=rel_path)
        _skip(rel_path, "vanished")
        return None
    except OSError as exc:
        _skip(rel_path, "unreadable", error=str(exc))
        if left_out is not None:  # counted: the reindex warns of it
            left_out.append((rel_path, "unreadable"))
        return None
    mode = st.st_mode
    if not stat.S_ISREG(mode):
        reason = "symlink" if stat.S_ISLNK(mode) else "not_regular"
        _skip(rel_path, reason)
        if left_out is not None:
            left_out.append((rel_path, reason))
        return None
    return ListedFile(rel_path, st.st_size, st.st_mtime_ns)


def _scan_directory(
    fd: int,
    prefix: str,
    secrets: SecretFilter,
    files: list[ListedFile],
    secret_skipped: list[tuple[str, str]],
    left_out: list[tuple[str, str]] | None = None,
    *,
    root: str,
) -> list[str]:
    """List the files of one open directory into ``files``; return its
    subdirectories' names (``SKIP_DIRS`` left out) for the caller to enter.

    The rules of :func:`_listed` for each entry, with the descriptor the
    walk already holds: each file is ``fstatat``-ed relative to it, never
    following a link; a symlink (to a directory too) is a file to refuse.
    """
    subdirs: list[str] = []
    rule_for, add = secrets.rule_for, files.append
    binary, is_reg = BINARY_EXTENSIONS, stat.S_ISREG
    marks = (len(files), len(secret_skipped), 0 if left_out is None else len(left_out))
    try:
        if prefix:  # (the root was checked when it was opened)
            # Listable but not searchable (``r--``) lists names whose stat fails.
            os.stat(".", dir_fd=fd, follow_symlinks=False)
        with os.scandir(fd) as entries:
            for entry in entries:
                name = entry.name
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    is_dir = False
                if is_dir:
                    if name not in SKIP_DIRS:
                        subdirs.append(name)
                    continue
                rel_path = prefix + name
                # The checks of _excluded and _regular_file, inlined for the
                # common file (a re-run lists every file of the resource);
                # anything else takes the functions, which log the skip.
                dot = name.rfind(".")
                if (dot >= 0 and name[dot:].lower() in binary) or rule_for(rel_path) is not None:
                    _excluded(rel_path, name, rule_for, secret_skipped, left_out)
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    st = None
                if st is not None and is_reg(st.st_mode):
                    add(ListedFile(rel_path, st.st_size, st.st_mtime_ns))
                    continue
                found = _regular_file(
                    rel_path, functools.partial(entry.stat, follow_symlinks=False), left_out
                )
                if found is not None:
                    add(found)
    except OSError as exc:
        if not prefix:  # the root itself (opened and checked a moment ago)
            raise _cannot_list(root, exc) from None
        _unreadable_directory(root, prefix.rstrip("/"), exc, left_out)
        return []
    if "refs" in subdirs and "objects" in subdirs and _is_git_directory(fd):
        if not prefix:
            raise _git_directory_root(root)
        # A bare clone or a renamed .git: none of it is the project's.
        del files[marks[0] :], secret_skipped[marks[1] :]
        if left_out is not None:
            del left_out[marks[2] :]
        _skip(prefix.rstrip("/") or ".", "git_directory")
        return []
    return subdirs


def _walk_listed(
    root: str,
    secrets: SecretFilter,
    secret_skipped: list[tuple[str, str]],
    exclude: frozenset[str] = frozenset(),
    left_out: list[tuple[str, str]] | None = None,
) -> list[ListedFile]:
    """The listing of a walked (non-git) resource, sorted by path, in one pass
    (see :func:`_walk_batches`)."""
    files: list[ListedFile] = []
    for batch in _walk_batches(root, secrets, secret_skipped, exclude, left_out):
        files += batch
    files.sort()  # by path: the first field, unique
    secret_skipped.sort()
    return files


def _open_root(root: str) -> int:
    """A descriptor of the resource's root directory.

    Raises:
        ResourceListingError: it cannot be opened (unreadable, gone, not a
            directory): a listing of nothing would delete every indexed file
            of the resource, where the operator must hear of it instead.
    """
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise _cannot_list(root, exc) from None
    try:
        # Listable but not searchable (``r--``): every name, no file's stat.
        os.stat(".", dir_fd=fd, follow_symlinks=False)
    except OSError as exc:
        os.close(fd)
        raise _cannot_list(root, exc) from None
    return fd


def _git_directory_root(root: str) -> ResourceListingError:
    return ResourceListingError(
        f"{root!r} is a git repository's own directory (or lies in one): git's objects, "
        "refs and config, not a project's files; nothing of it is listed (remove the "
        "resource and register the work tree instead)"
    )


def refuse_swapped_root(root: str | os.PathLike[str]) -> None:
    """Refuse a registered resource's root that is a symlink now.

    Roots are registered resolved, so a symlink there was put in its place
    since (``mv real real.orig; ln -s other real``): following it would
    index and serve another tree as the resource.  Raises
    ResourceListingError (its indexed files are kept)."""
    if os.path.islink(root):
        raise ResourceListingError(
            f"the resource's directory {os.fspath(root)!r} is a symlink now, not the directory "
            "registered: nothing is listed or read through it and its indexed files are kept "
            "(put the directory back, or register the one it leads to)"
        )


def _cannot_list(path: str, exc: OSError) -> ResourceListingError:
    """The error that fails a resource's listing (its indexed files kept)."""
    why = exc.strerror or type(exc).__name__
    fix = (
        "fix its permissions, or run the reindex as a user that can read it"
        if exc.errno in (errno.EACCES, errno.EPERM)
        else "run the reindex again once it can be read"
    )
    return ResourceListingError(
        f"cannot read the directory {path!r}: {why}; its indexed files are kept ({fix})"
    )


def _unreadable_directory(
    root: str, path: str, exc: OSError, left_out: list[tuple[str, str]] | None
) -> None:
    """A directory under the root that cannot be listed: nothing under it is
    indexed, and the reindex counts it (``unreadable_directory``) and warns.

    Raises:
        ResourceListingError: not a matter of permissions (EIO, EMFILE, ...):
            a subtree left out for that would drop its indexed files, so the
            listing fails instead and the resource keeps them.
    """
    if exc.errno not in (errno.EACCES, errno.EPERM):
        raise _cannot_list(os.path.join(root, path), exc) from None
    _skip(path, "unreadable_directory", error=str(exc))
    if left_out is not None:
        left_out.append((path, "unreadable_directory"))


def _walk_batches(
    root: str,
    secrets: SecretFilter,
    secret_skipped: list[tuple[str, str]],
    exclude: frozenset[str] = frozenset(),
    left_out: list[tuple[str, str]] | None = None,
) -> Generator[list[ListedFile], None, None]:
    """The files of a walked (non-git) resource, one directory's at a time,
    unsorted; a caller that stops early does not walk the rest.

    Each directory is opened ``O_DIRECTORY | O_NOFOLLOW`` relative to its
    parent's descriptor (a directory swapped for a symlink after it was
    seen cannot be entered), scanned through that descriptor, and its files
    ``fstatat``-ed relative to it: the guarantees of :func:`_listed`,
    without a second pass that opens every directory again and splits
    every path.  Only the descriptors of the directories
    on the current path are open (depth first), and closed when the caller
    closes the generator.  Directories whose relative path is in
    ``exclude`` are not entered.
    """
    root_fd = _open_root(root)
    stack: list[tuple[int, str, Iterator[str]]] = [(root_fd, "", iter(()))]
    try:
        files: list[ListedFile] = []
        names = _scan_directory(root_fd, "", secrets, files, secret_skipped, left_out, root=root)
        stack[-1] = (root_fd, "", iter(names))
        yield files
        while stack:
            fd, prefix, todo = stack[-1]
            name = next(todo, None)
            if name is None:
                stack.pop()
                os.close(fd)
                continue
            path = prefix + name
            if exclude and path in exclude:
                _skip(path, "data_dir")
                continue
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                    # A symlink now, a file, or gone: not a directory to list.
                    _skip(path, "unreadable", error=str(exc))
                else:
                    _unreadable_directory(root, path, exc, left_out)
                continue
            stack.append((sub, path + "/", iter(())))
            files = []
            names = _scan_directory(
                sub, path + "/", secrets, files, secret_skipped, left_out, root=root
            )
            stack[-1] = (sub, path + "/", iter(names))
            yield files
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def _open_directory(directory: str, names: list[str], fds: list[int]) -> tuple[int | None, str]:
    """Make ``fds[-1]`` the descriptor of ``directory`` (``names`` its open components).

    Keeps the descriptors of the common prefix, closes the rest, opens the
    missing components ``O_NOFOLLOW``.  Returns the descriptor, or None and
    the reason to log for every file under a refused directory.
    """
    parts = directory.split("/") if directory else []
    if any(part in ("", ".", "..") or "\0" in part for part in parts):
        return None, "outside_root"
    if any(part in SKIP_DIRS for part in parts):
        return None, "skip_dir"
    common = 0
    limit = min(len(parts), len(names))
    while common < limit and names[common] == parts[common]:
        common += 1
    while len(names) > common:
        names.pop()
        os.close(fds.pop())
    for part in parts[common:]:
        try:
            fd = os.open(part, _PATH_FLAGS, dir_fd=fds[-1])
        except OSError:
            # A symlink (ELOOP/ENOTDIR), a file, or gone: lstat-ing under it
            # would follow it out of the tree.
            return None, "symlink"
        if _is_git_directory(fd):  # a bare clone or a renamed .git, tracked or not
            os.close(fd)  # not kept open: what lies under it is checked again
            return None, "git_directory"
        names.append(part)
        fds.append(fd)
    return fds[-1], ""


def list_resource(
    root: str | os.PathLike[str],
    resource_type: str = "git-checkout",
    *,
    secrets: SecretFilter = DEFAULT_SECRET_FILTER,
    exclude: Iterable[str | os.PathLike[str]] = (),
) -> Listing:
    """List the regular files of a resource, sorted by path, each once.

    Args:
        root: The resource's root directory.
        resource_type: ``"git-checkout"`` or ``"git"`` lists with
            ``git ls-files --cached --others --exclude-standard`` (so ignored
            files are left out); any other type walks the tree.
        secrets: The secret deny-list to apply (the resource's own, from the
            registry; the default list otherwise).
        exclude: Directories never listed, wherever they are (the data
            directory): one inside ``root`` is left out with everything
            under it; others change nothing.

    Returns:
        One ``ListedFile`` per regular file (per ``lstat``) that is not under a
        ``SKIP_DIRS`` directory or a git repository directory (a bare clone
        inside the tree, tracked or not), has no ``BINARY_EXTENSIONS`` extension and is
        not denied by ``secrets``; and the denied paths.  Symlinks, FIFOs,
        sockets, devices, directories and paths that could leave the root are
        skipped and logged, never followed.

    Raises:
        ResourceListingError: a git resource that git cannot list (never
            answered by a walk, which would list what ``.gitignore`` excludes);
            ``root`` is a git repository's own directory or lies in one;
            ``root`` is one of the ``exclude`` directories; ``root`` cannot be
            opened (unreadable, or gone since it was checked).
    """
    root_str = os.fspath(root)
    inside = excluded_below(root_str, exclude)
    # Nothing outside the root is opened to tell (``resource add`` looks at
    # its parents): a ``.git`` on its path here, the root itself in the walk.
    if any(part in _VCS_DIRS for part in Path(root_str).parts):
        raise _git_directory_root(root_str)
    secret_skipped: list[tuple[str, str]] = []
    left_out: list[tuple[str, str]] = []
    if resource_type in _GIT_TYPES:
        candidates: Iterable[str] = _git_paths(root_str)
        if inside:
            candidates = [p for p in candidates if not _under_any(p, inside)]
        files = tuple(_listed(root_str, candidates, secrets, secret_skipped, left_out))
    else:
        files = tuple(_walk_listed(root_str, secrets, secret_skipped, inside, left_out))
    return Listing(files, tuple(secret_skipped), tuple(sorted(left_out)))


def excluded_below(
    root: str | os.PathLike[str], exclude: Iterable[str | os.PathLike[str]]
) -> frozenset[str]:
    """The ``exclude`` directories that lie inside ``root``, as paths relative
    to it (``/``-separated; both sides resolved with ``realpath``, as the
    listing never follows a link).  One that holds ``root`` (a resource under
    ``$HOME`` with the data directory there) or lies elsewhere changes nothing.

    Raises:
        ResourceListingError: ``root`` is one of them (its own index files
            would be among the resource's).
    """
    real_root = os.path.realpath(root)
    inside: set[str] = set()
    for directory in exclude:
        real = os.path.realpath(directory)
        if real == real_root:
            raise ResourceListingError(
                f"{real_root} is the data directory: its index files would be "
                "indexed; keep the data directory outside the resource or in a "
                "directory of its own inside it (such as ./data)"
            )
        rel = os.path.relpath(real, real_root)
        if rel != os.pardir and not rel.startswith(os.pardir + os.sep):
            inside.add(rel.replace(os.sep, "/"))
    return frozenset(inside)


def _under_any(rel_path: str, directories: frozenset[str]) -> bool:
    """Whether ``rel_path`` lies below one of ``directories`` (relative paths)."""
    return any(rel_path.startswith(d + "/") for d in directories)


def git_ignored_work_tree(
    root: str | os.PathLike[str],
    resource_type: str = "git-checkout",
    *,
    secrets: SecretFilter = DEFAULT_SECRET_FILTER,
) -> str | None:
    """The top level of the git work tree that ignores every file under a git
    resource's ``root`` while walking it would list one: such a resource
    indexes nothing, where a ``directory`` resource of ``root`` would not.

    Its cost: one ``git ls-files`` of ``root`` (the whole listing, as a
    reindex reads it), whose entries are checked in order until one would
    be indexed; the walk stops at the first directory holding such a file.

    Args:
        root: The resource's root directory.
        resource_type: Its type; only a git type (as for :func:`list_resource`)
            can be ignored by git.
        secrets: The resource's secret deny-list, applied to both listings.

    Returns:
        The work tree's top level (``root`` itself if git does not name it),
        or None: not a git type, git lists a file, nothing to list either
        way, or git cannot list ``root`` (:func:`list_resource` says why).
    """
    if resource_type not in _GIT_TYPES:
        return None
    root_str = os.fspath(root)
    try:
        candidates = _git_paths(root_str)
        if _any_item(_listed(root_str, candidates, secrets, [])):
            return None
        if not _any_item(_walk_batches(root_str, secrets, [])):
            return None
    except ResourceListingError:
        return None
    return _git_toplevel(root_str) or root_str


def _any_item(items: Generator[object, None, None]) -> bool:
    """Whether ``items`` yields a truthy item; the generator (and the
    descriptors it holds) is closed at the first one."""
    with contextlib.closing(items):
        return any(items)


def _git_toplevel(root: str) -> str | None:
    """``git rev-parse --show-toplevel`` in ``root``, or None if git cannot say."""
    try:
        completed = subprocess.run(  # fixed argv, no shell
            ["git", "-c", "core.fsmonitor=false", "-C", root, "rev-parse", "--show-toplevel"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=_git_env(),
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    toplevel = os.fsdecode(completed.stdout.removesuffix(b"\n"))
    return toplevel if completed.returncode == 0 and toplevel else None


def list_files(
    root: str | os.PathLike[str],
    resource_type: str = "git-checkout",
    *,
    secrets: SecretFilter = DEFAULT_SECRET_FILTER,
) -> Iterator[ListedFile]:
    """The files of :func:`list_resource`, one by one (same arguments and errors)."""
    yield from list_resource(root, resource_type, secrets=secrets).files


def _open_beneath(root: str, parts: list[str]) -> int:
    """Open ``parts`` under ``root`` without following any symlink on the way.

    Each directory component is opened ``O_DIRECTORY | O_NOFOLLOW`` relative to
    the previous one, so a component swapped for a symlink after listing fails
    with ``ELOOP``/``ENOTDIR`` instead of leading outside the root.
    """
    dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            next_fd = os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
            os.close(dir_fd)
            dir_fd = next_fd
        return os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


_ERRNO_REASONS = {
    errno.ENOENT: "vanished",
    errno.ELOOP: "symlink",
    errno.ENOTDIR: "symlink",
    errno.EMLINK: "symlink",  # what FreeBSD returns for O_NOFOLLOW on a symlink
    errno.ENXIO: "not_regular",  # a unix socket
}


def read_file(
    root: str | os.PathLike[str], listed: ListedFile, *, max_bytes: int = MAX_FILE_BYTES
) -> ReadFile | None:
    """Read a listed file's bytes, refusing anything that is no longer a safe regular file.

    Args:
        root: The root the file was listed under.
        listed: The file, as ``list_files`` yielded it.
        max_bytes: Largest number of bytes accepted; counted on what is read,
            so a file that grew since listing is still caught.

    Returns:
        The file's bytes with the size and mtime of the open descriptor, or
        None (logged as ``context_hydrator.file_skipped``) if the file vanished,
        became a symlink or a non-regular file, sits under a component that
        became a symlink, is larger than ``max_bytes``, or cannot be read.

    Raises:
        ValueError: If ``max_bytes`` is negative.
    """
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
    rel_path = listed.rel_path
    parts = _split_safe(rel_path)
    if parts is None:
        _skip(rel_path, "outside_root")
        return None
    try:
        fd = _open_beneath(os.fspath(root), parts)
    except OSError as exc:
        reason = _ERRNO_REASONS.get(exc.errno or 0, "unreadable")
        if reason == "vanished":
            _log.debug("context_hydrator.vanished", path=rel_path)
        _skip(rel_path, reason, error=exc.strerror)
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            _skip(rel_path, "not_regular")
            return None
        if st.st_size > max_bytes:
            _skip(rel_path, "too_large", size=st.st_size, max_bytes=max_bytes)
            return None
        chunks: list[bytes] = []
        remaining = max_bytes + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, _READ_CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    except OSError as exc:
        _skip(rel_path, "unreadable", error=exc.strerror)
        return None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        _skip(rel_path, "too_large", size=len(data), max_bytes=max_bytes)
        return None
    return ReadFile(rel_path=rel_path, data=data, size=len(data), mtime_ns=st.st_mtime_ns)
