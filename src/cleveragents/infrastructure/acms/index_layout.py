"""Where the live indexes of a data directory are, and how a rebuild swaps them.

Each live index name (``text``, ``vectors``, ``graph``, ``catalog``) is a
symbolic link into a generation directory::

    data/text    -> .gen/<ULID>/text
    data/vectors -> .gen/<ULID>/vectors   ...

A rebuild moves its freshly built directory into a new generation and
replaces the link with one ``rename(2)``: a reader resolving ``data/text``
gets the old index or the new one, never a missing or half-built one.

Links rather than swapped directories: every engine opens its index through
the link and resolves it (Tantivy and SQLite both canonicalise the path), so
each open file belongs to exactly one generation, and a process notices a
rebuild by the link's target changing (``TantivyTextBackend`` compares real
paths, ``FaissVectorBackend`` and ``SqliteCatalog`` the database's inode).
The previous generation stays on disk until the next rebuild, so a reader in
the middle of a query is never pulled from under.  A data directory made
before this layout (real directories) is converted by its first rebuild.
Directories made here are owner-only (0700), whatever the umask.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from cleveragents.domain.models.acms.ulids import new_ulid
from cleveragents.infrastructure.acms.file_modes import make_private_dirs
from cleveragents.infrastructure.acms.fs_swap import exchange_paths

__all__ = ["GENERATIONS", "collect_garbage", "install", "live_index_path"]

GENERATIONS = ".gen"


def live_index_path(data_dir: str | os.PathLike[str], name: str) -> Path:
    """``data_dir/name``; on first use, a link to an empty new generation."""
    root = Path(data_dir)
    live = root / name
    if live.exists() or live.is_symlink():
        return live
    target = Path(GENERATIONS) / new_ulid() / name
    make_private_dirs(root / target)
    # Another process may create the link at the same moment: first one wins,
    # the loser's empty generation is collected by the next rebuild.
    with contextlib.suppress(FileExistsError):
        os.symlink(target, live)
    return live


def install(
    data_dir: str | os.PathLike[str], name: str, fresh: Path, generation: str
) -> Path | None:
    """Make ``fresh`` the live ``name`` atomically.

    ``fresh`` moves to ``.gen/<generation>/<name>`` and ``data_dir/name``
    is replaced by a link to it.  Returns where a displaced real directory
    (the layout before links) now is, for the caller to dispose of.
    """
    root = Path(data_dir)
    target = Path(GENERATIONS) / generation / name
    make_private_dirs((root / target).parent)
    os.replace(fresh, root / target)
    link = root / f".{name}.swap"
    with contextlib.suppress(FileNotFoundError):
        link.unlink()
    os.symlink(target, link)
    live = root / name
    if live.is_symlink() or not live.exists():
        os.replace(link, live)
        return None
    exchange_paths(link, live)  # a real directory cannot be replaced by rename(2)
    return link


def collect_garbage(data_dir: str | os.PathLike[str], names: tuple[str, ...]) -> None:
    """Delete the generations no live link points into."""
    root = Path(data_dir)
    gens = root / GENERATIONS
    if not gens.is_dir():
        return
    live = set()
    for name in names:
        link = root / name
        if link.is_symlink():
            parts = Path(os.readlink(link)).parts
            if len(parts) >= 2 and parts[0] == GENERATIONS:
                live.add(parts[1])
    for entry in gens.iterdir():
        if entry.name not in live:
            shutil.rmtree(entry, ignore_errors=True)
