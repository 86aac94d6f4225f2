"""Planning files in worker processes: parse, chunk, triples, units, embeddings.

The indexer's CPU work per changed file (decode, tree-sitter parse, chunking,
code-graph triples, units, embeddings) is pure: bytes in, a plan out.  It runs
here, either in the indexing process (``jobs=1``) or in a pool of worker
processes; the engine writes stay in the one writer, the index store's
transaction in the parent::

    IndexSession (parent) ── batch of (path, bytes) ──► worker: plan_batch
          ▲                                               │ parser, embedder
          └──────── [FilePlan | failure] per file ◄───────┘ (built once per worker)

- Workers start with the ``forkserver`` method, never ``fork``: the parent
  has threads (Tantivy's searcher and writer threads, logging) whose locks a
  forked child could inherit held.
- A worker builds its own code parser and embedder from a picklable
  :class:`PlannerSpec` (factories, not live objects), once per process, and
  imports no index engine.
- A file whose planning raises is reported as a failure (``parse_failed``),
  never lost silently; the parent decides (the session skips it).
- Workers run :data:`WORKER_NICE` steps below the writer's scheduling
  priority.  The writer is the pipeline's one serial stage: at equal
  priority, two workers and the writer on two cores each got ~0.7 of a
  core, the writer fell behind and applied a backlog of batches alone at
  the end (~1.4 s of the standard library's ~14 s at two jobs).  With the
  writer first, the same run took 0.93-0.95x the time and ~4% less CPU in
  all (fewer preemptions of the writer mid-write).  A nice value also ranks
  the workers below other processes of the session (the kernel's autogroup
  puts a session's processes together against other sessions): planning
  yields to the queries of an agent host that reindexes in the background.
  ``ACMS_WORKER_NICE`` (0-19) sets another step count for the pools made
  after it is set; 0 plans at the writer's priority (a host without
  autogroup beside other busy processes may prefer it).

Fault injection for tests: ``ACMS_FAULT_PLAN=kill:<path>`` makes a *worker*
process SIGKILL itself when it plans ``<path>``; ``crash:<path>`` makes any
process (the writer too) SIGKILL itself when it plans ``<path>`` with the
code parser, as a parser's native crash would; ``raise:<path>`` makes the
planning of ``<path>`` raise (in any process).  ``<path>`` may be several,
separated by commas.  The parent reads the variable
once per pool and passes it to its workers.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import multiprocessing.util
import os
import pickle
import re
import select
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import context as mp_context
from multiprocessing import popen_forkserver
from multiprocessing.process import BaseProcess
from pathlib import Path

import numpy as np
import numpy.typing as npt

from cleveragents._logging import get_logger
from cleveragents.application.services.chunking import chunk_text, detect_language, make_units
from cleveragents.application.services.code_graph import (
    PathLookup,
    chunk_starts,
    code_triples,
    extract_facts,
    file_triples,
    parser_language,
)
from cleveragents.application.services.resource_files import decode_text
from cleveragents.domain.models.acms.backends import IndexUnit, WriteTriple
from cleveragents.domain.models.acms.code_facts import CodeParser
from cleveragents.domain.models.acms.embedding import Embedder
from cleveragents.domain.models.acms.uko import file_uri

__all__ = [
    "COLLECT_EVERY",
    "EMBED_BATCH",
    "FAULT_ENV_VAR",
    "NICE_ENV_VAR",
    "WORKER_NICE",
    "FilePlan",
    "PlanFailure",
    "PlannerPool",
    "PlannerSpec",
    "default_jobs",
    "embed_plans",
    "embed_texts",
    "fault_from_env",
    "plan_file",
    "worker_nice_from_env",
]

EMBED_BATCH = 256
# A worker collects cyclic garbage once per this many batches (see _init_worker).
COLLECT_EVERY = 16
_log = get_logger("cleveragents.acms.indexer")
FAULT_ENV_VAR = "ACMS_FAULT_PLAN"
# One worker per core, but never so many that their parsers and embedders
# (a MiniLM worker holds ~100 MB) crowd out the writer.
MAX_DEFAULT_JOBS = 8


def default_jobs() -> int:
    """One job per core usable by this process, at most :data:`MAX_DEFAULT_JOBS`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_DEFAULT_JOBS))


@dataclass(frozen=True, slots=True)
class PlannerSpec:
    """What a worker builds its own embedder and code parser from.

    Both are picklable callables (a class, or ``functools.partial`` of one),
    never live objects: a worker loads its own model once.
    """

    embedder: Callable[[], Embedder]
    code_parser: Callable[[], CodeParser] | None = None
    # ``name:dimension`` of what ``embedder`` builds.  The indexer plans in
    # its own process when its embedder is another one (a host that
    # overrides the container's embedder): workers must embed exactly as the
    # index's recorded identity says.
    embedder_identity: str | None = None
    # The text index's ``PreparedWrites.preparer`` (a picklable function):
    # workers run it on each unit's content, so the writer does not.
    text_preparer: Callable[[str], object] | None = None


@dataclass(frozen=True, slots=True)
class FilePlan:
    """A changed file's units, their embeddings and its graph triples."""

    units: tuple[IndexUnit, ...]
    triples: tuple[WriteTriple, ...]
    subjects: tuple[str, ...]
    # One ``PlannerSpec.text_preparer`` result per unit, when a worker ran it.
    prepared: tuple[object, ...] | None = None


@dataclass(frozen=True, slots=True)
class PlanFailure:
    """A file that could not be planned: the session skips it with ``reason``."""

    reason: str
    detail: str


def worker_nice_from_env() -> int:
    """The steps below the writer's priority workers plan at:
    :data:`NICE_ENV_VAR` if set, else :data:`WORKER_NICE`.

    Raises:
        ValueError: the variable is not an integer from 0 to 19.
    """
    raw = os.environ.get(NICE_ENV_VAR, "").strip()
    if not raw:
        return WORKER_NICE
    try:
        steps = int(raw)
    except ValueError:
        steps = -1
    if not 0 <= steps <= 19:
        raise ValueError(f"{NICE_ENV_VAR}={raw!r}: expected an integer from 0 to 19")
    return steps


def fault_from_env() -> tuple[str, str] | None:
    """The planning fault :data:`FAULT_ENV_VAR` asks for (tests only), or None."""
    return _fault(os.environ.get(FAULT_ENV_VAR))


def _fault(raw: str | None) -> tuple[str, str] | None:
    if not raw:
        return None
    kind, _, path = raw.partition(":")
    if kind not in ("kill", "raise", "crash") or not path:
        raise ValueError(
            f"{FAULT_ENV_VAR}={raw!r}: expected kill:<path>, crash:<path> or raise:<path>"
        )
    return kind, path


def plan_file(
    resource_id: str,
    path: str,
    data: bytes,
    parser: CodeParser | None,
    files: PathLookup,
    fault: tuple[str, str] | None = None,
) -> FilePlan:
    """The units and triples of one text file (no embeddings yet)."""
    if fault is not None and path in fault[1].split(","):
        if fault[0] == "kill" and multiprocessing.parent_process() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        if fault[0] == "crash" and parser is not None:  # as a parser's native crash would
            os.kill(os.getpid(), signal.SIGKILL)
        if fault[0] == "raise":
            raise RuntimeError(f"fault injected while planning {path}")
    text = decode_text(data)
    language = detect_language(path)
    parsed = parser.parse(text, parser_language(path, language)) if parser else None
    if parser is not None and parsed is None and language in parser.languages():
        # The parser logs why (too large, nesting that crashes a grammar);
        # this names the file, whose units are still indexed.
        _log.info("indexer.code_graph_skipped", path=path, language=language)
    definitions: list[tuple[str, int]]
    calls: list[tuple[str, int]] = []
    qualified: list[tuple[str, int]]
    if parsed is not None:
        chunks = chunk_text(text, language, starts=chunk_starts(parsed))
        triples = code_triples(resource_id, path, language, chunks, parsed, files)
        definitions = [(s.name, s.start_line) for s in parsed.symbols]
        qualified = [(s.qualified_name, s.start_line) for s in parsed.symbols]
        calls = [(c.callee, c.line) for c in parsed.calls]
    else:
        chunks = chunk_text(text, language)
        facts = extract_facts(path, text, language)
        triples = file_triples(resource_id, path, language, chunks, facts, files.modules)
        definitions = [(name.rsplit(".", 1)[-1], line) for name, _, line in facts.symbols]
        qualified = [(name, line) for name, _, line in facts.symbols]
    units = make_units(
        resource_id,
        path,
        text,
        language=language,
        chunks=chunks,
        definitions=definitions,
        calls=calls,
        qualified=qualified,
    )
    own = file_uri(resource_id, path)
    # The file and the URIs under it: never the resource node (its one
    # `contains` edge is dropped as an exact triple instead).
    subjects = tuple(sorted({t[0] for t in triples if t[0].startswith(own)} | {own}))
    return FilePlan(tuple(units), tuple(triples), subjects)


def embed_texts(embedder: Embedder, texts: Sequence[str]) -> npt.NDArray[np.float32]:
    """Embed ``texts`` in batches of :data:`EMBED_BATCH` (one array back)."""
    if not texts:
        return np.zeros((0, embedder.dimension), dtype=np.float32)
    parts = [embedder.embed(texts[i : i + EMBED_BATCH]) for i in range(0, len(texts), EMBED_BATCH)]
    return np.ascontiguousarray(np.vstack(parts), dtype=np.float32)


# ---------------------------------------------------------------- worker side

Outcome = tuple[FilePlan, "npt.NDArray[np.float32]"] | PlanFailure


#: How many steps (``nice``) below the writer's priority workers plan at.
WORKER_NICE = 10
#: The environment variable that sets another step count (0-19).
NICE_ENV_VAR = "ACMS_WORKER_NICE"


class _Worker:
    """Per-process state: built once, by the pool's initializer."""

    spec: PlannerSpec | None = None
    fault: tuple[str, str] | None = None
    parser: CodeParser | None = None
    embedder: Embedder | None = None
    listing: tuple[str, PathLookup] | None = None
    batches = 0


def _exit_with(writer_pid: int) -> None:
    """Exit this worker as soon as the writer process is gone.

    A writer killed with SIGKILL (the OOM killer, a crash test) never shuts
    its pool down; its workers would wait on their queue forever, and hold
    the fork server open.  The worker's parent is the fork server, not the
    writer, so ``PR_SET_PDEATHSIG`` cannot tell: a thread waits on the
    writer's pidfd instead.
    """
    try:
        fd = os.pidfd_open(writer_pid)
    except (AttributeError, OSError):  # no pidfd: poll
        fd = None

    def wait() -> None:
        if fd is not None:
            select.select([fd], [], [])
        else:
            while True:
                try:
                    os.kill(writer_pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=wait, name="acms-writer-watch", daemon=True).start()


def _init_worker(
    spec: PlannerSpec, fault: tuple[str, str] | None, writer_pid: int, nice: int
) -> None:
    # The parent handles Ctrl-C and stops the pool; a worker dies with the
    # pool, or with the writer (_exit_with).  A signal sent to the writer's
    # whole process group (`timeout`, `kill -- -PGID`, a terminal's
    # Ctrl-C) must not reach the workers: killed under the pool's feet,
    # a pool feeding a dead worker could hang the writer for good, holding
    # the reindex lock.  So a worker leads a process group of its own.  It
    # still takes SIGTERM (the fork server ignores it, see fork_server.py,
    # and its children inherit that): the pool terminates its workers with
    # it when one of them died.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    # The writer first (see the module doc); a sandbox that refuses it
    # leaves the workers at the writer's priority.
    if nice:
        with contextlib.suppress(OSError):
            os.nice(nice)
    _exit_with(writer_pid)
    _Worker.spec = spec
    _Worker.fault = fault
    _Worker.parser = spec.code_parser() if spec.code_parser is not None else None
    _Worker.embedder = spec.embedder()
    built = f"{_Worker.embedder.name}:{_Worker.embedder.dimension}"
    if spec.embedder_identity is not None and built != spec.embedder_identity:
        # The factory and its declared identity disagree: a programming
        # error, never vectors of another embedder under this identity.
        raise RuntimeError(f"worker embedder {built} is not {spec.embedder_identity}")
    # Planning frees what it allocates by reference counting (a run over the
    # standard library left no cyclic garbage at all), so the cyclic
    # collector only walked each batch's containers (~5% of a worker's time).
    # It runs once every COLLECT_EVERY batches instead, over what the worker
    # made after this point (``freeze``: the imports, parser and
    # embedder are never walked again).
    gc.disable()
    gc.freeze()


def _lookup(listing_file: str) -> PathLookup:
    cached = _Worker.listing
    if cached is None or cached[0] != listing_file:
        with open(listing_file, "rb") as fh:
            paths, package = pickle.load(fh)  # written by our parent, owner-only
        cached = _Worker.listing = (listing_file, PathLookup(frozenset(paths), package))
    return cached[1]


def plan_batch(
    resource_id: str,
    items: Sequence[tuple[str, bytes]],
    *,
    parser: CodeParser | None,
    embedder: Embedder,
    files: PathLookup,
    fault: tuple[str, str] | None = None,
    preparer: Callable[[str], object] | None = None,
) -> list[Outcome]:
    """Plan and embed a batch of files; a file whose planning raises is a
    failure.  ``preparer`` (the text index's) runs on each unit's content."""
    plans: list[FilePlan | PlanFailure] = []
    for path, data in items:
        try:
            plan = plan_file(resource_id, path, data, parser, files, fault)
            if preparer is not None:
                prepared = tuple(preparer(u.content) for u in plan.units)
                plan = FilePlan(plan.units, plan.triples, plan.subjects, prepared)
            plans.append(plan)
        except Exception as exc:  # one hostile file must not stop the run
            plans.append(PlanFailure("parse_failed", f"{type(exc).__name__}: {exc}"[:200]))
    return embed_plans(embedder, plans)


def embed_plans(embedder: Embedder, plans: Sequence[FilePlan | PlanFailure]) -> list[Outcome]:
    """Each plan with its units' embeddings (one call for all); failures as they are."""
    texts = [u.content for p in plans if isinstance(p, FilePlan) for u in p.units]
    rows = embed_texts(embedder, texts)
    out: list[Outcome] = []
    offset = 0
    for p in plans:
        if isinstance(p, PlanFailure):
            out.append(p)
            continue
        n = len(p.units)
        out.append((p, rows[offset : offset + n].copy()))
        offset += n
    return out


def _plan_in_worker(
    resource_id: str, listing_file: str, items: Sequence[tuple[str, bytes]]
) -> list[Outcome]:
    assert _Worker.embedder is not None and _Worker.spec is not None
    _Worker.batches += 1
    if _Worker.batches % COLLECT_EVERY == 0:
        gc.collect()  # a bound on cyclic garbage, should any file make some
    return plan_batch(
        resource_id,
        items,
        parser=_Worker.parser,
        embedder=_Worker.embedder,
        files=_lookup(listing_file),
        fault=_Worker.fault,
        preparer=_Worker.spec.text_preparer,
    )


# ---------------------------------------------------------------- parent side


_MAIN_SWAP = threading.Lock()


class _WorkerProcess(mp_context.ForkServerProcess):
    """A forkserver process that does not run the host's ``__main__`` again.

    The spawn and forkserver methods import the parent's main script in each
    child (as ``__mp_main__``), so that what it defines unpickles there.  A
    host script without an ``if __name__ == "__main__":`` guard would then
    run again in every worker: open the data directory, start another
    reindex, and the worker dies with the files of its batch.  A worker needs
    nothing from the host's script when its spec holds this package's
    factories, so the child is described with an empty main module.  (A spec
    that names ``__main__`` objects gets the standard context: they must
    unpickle there.)
    """

    @staticmethod
    def _Popen(process_obj: BaseProcess) -> popen_forkserver.Popen:
        # The description (preparation data and the pickled process) is
        # written inside this call; the swap ends before it returns.
        with _MAIN_SWAP:
            host = sys.modules["__main__"]
            sys.modules["__main__"] = types.ModuleType("__main__")
            try:
                return popen_forkserver.Popen(process_obj)
            finally:
                sys.modules["__main__"] = host


class _WorkerContext(mp_context.ForkServerContext):
    Process = _WorkerProcess


# The fork server's first preload: it makes the fork server ignore SIGTERM.
FORK_SERVER_MODULE = "cleveragents.application.services.fork_server"
_PLAN_DIR_PREFIX = "acms-plan-"
_MP_DIR_PREFIX = "acms-mp-"
# What the two kinds of directory hold: a pool's listing files, and the
# socket of multiprocessing's fork server (``listener-`` and 8 characters).
_SWEPT_ENTRY = re.compile(r"listing-[0-9]+\.pickle|listener-[a-z0-9_]{8}")
_AF_UNIX_PATH_MAX = 107  # sun_path is 108 bytes on Linux, with its NUL
_SHORT_TMP = "/tmp"  # where a socket goes when TMPDIR is too long for one


def _pid_namespace() -> str:
    """This process's PID namespace (its inode), ``"0"`` where /proc has none.

    A PID names a process only inside its namespace: containers that share a
    temporary directory each see their own PIDs.
    """
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def make_plan_dir(parent: str | None = None) -> str:
    """Make a pool's directory for its listing files, tagged with its owner.

    The name carries the PID namespace and the PID of the process that owns
    it (``acms-plan-<namespace>-<pid>-<random>``).  ``close`` removes the
    directory; a run killed before it (SIGKILL, SIGTERM, the OOM killer)
    cannot, so each new pool first removes the directories their owners left
    (:func:`sweep_plan_dirs`): a host that reindexes after such runs does not
    fill its temporary directory.
    """
    parent = tempfile.gettempdir() if parent is None else parent
    for base in dict.fromkeys([parent, *_mp_bases(parent)]):
        sweep_plan_dirs(base)
    return tempfile.mkdtemp(prefix=_owned_prefix(_PLAN_DIR_PREFIX), dir=parent)


def _owned_prefix(kind: str) -> str:
    return f"{kind}{_pid_namespace()}-{os.getpid()}-"


def own_multiprocessing_tempdir(parent: str | None = None) -> str | None:
    """Give ``multiprocessing`` an owner-tagged temporary directory, once per process.

    The fork server's socket lives in the directory ``multiprocessing``
    makes on first use (``pymp-<random>``) and removes at a normal exit; a
    killed run leaves it behind with nothing to tell whose it was.  Made
    here first (``acms-mp-<namespace>-<pid>-<random>``), it is removed at
    exit the same way, and :func:`sweep_plan_dirs` removes it after a
    killed run.  When the socket's path under ``parent`` would be too long
    for AF_UNIX (a long ``TMPDIR``: Python 3.11's own choice then fails to
    start the fork server), the directory is made in ``/tmp``, as later
    Pythons do.  Nothing is changed when the process already has one (the
    host used ``multiprocessing`` before) or the interpreter keeps no such
    setting.  Returns the directory set, or ``None``.
    """
    config = getattr(multiprocessing.current_process(), "_config", None)
    if not isinstance(config, dict) or config.get("tempdir") is not None:
        return None
    parent = tempfile.gettempdir() if parent is None else parent
    for base in _mp_bases(parent):
        path = tempfile.mkdtemp(prefix=_owned_prefix(_MP_DIR_PREFIX), dir=base)
        config["tempdir"] = path
        multiprocessing.util.Finalize(
            None, _remove_multiprocessing_tempdir, args=(shutil.rmtree, path), exitpriority=-100
        )
        return path
    return None


def _mp_bases(parent: str) -> list[str]:
    """Where the multiprocessing directory can go: ``parent``, else ``/tmp``,
    if the fork server's socket path fits there (the directory's name is the
    prefix and 8 characters; the socket's ``listener-`` and 8)."""
    bases = []
    for base in (parent, _SHORT_TMP):
        socket = os.path.join(base, _owned_prefix(_MP_DIR_PREFIX) + "x" * 8, "listener-xxxxxxxx")
        if len(os.fsencode(socket)) <= _AF_UNIX_PATH_MAX and os.path.isdir(base):
            bases.append(base)
    return bases[:1]


def _remove_multiprocessing_tempdir(rmtree: Callable[..., None], path: str) -> None:
    # As multiprocessing.util._remove_temp_dir: a strong reference to
    # rmtree, since the finalizer can run late in the interpreter's shutdown.
    rmtree(path, ignore_errors=True)
    current = multiprocessing.current_process()
    config = getattr(current, "_config", None) if current is not None else None
    if isinstance(config, dict) and config.get("tempdir") == path:
        config["tempdir"] = None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists (another user's), or it cannot be told: keep
    return True


def sweep_plan_dirs(parent: str) -> int:
    """Remove the pools' directories in ``parent`` whose owner process is gone.

    Only directories this user owns, named by :func:`make_plan_dir` or
    :func:`own_multiprocessing_tempdir` in this PID namespace, whose PID no
    longer runs, and holding nothing but listing files or the fork server's
    socket; anything else (another user's, another namespace's, a live
    owner's, an unexpected file inside) is left alone.  A PID reused since
    only delays the removal until that process ends.  Returns how many were
    removed; never raises for a directory it could not remove.
    """
    namespace = _pid_namespace()
    tags = tuple(f"{kind}{namespace}-" for kind in (_PLAN_DIR_PREFIX, _MP_DIR_PREFIX))
    removed = 0
    try:
        names = os.listdir(parent)
    except OSError:
        return 0
    uid = os.geteuid()
    for name in names:
        tag = next((t for t in tags if name.startswith(t)), None)
        if tag is None:
            continue
        pid_text = name[len(tag) :].partition("-")[0]
        if not pid_text.isdigit() or _alive(int(pid_text)):
            continue
        path = os.path.join(parent, name)
        try:
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
                continue
            inside = os.listdir(path)
            if not all(_SWEPT_ENTRY.fullmatch(entry) for entry in inside):
                continue
            for entry in inside:
                os.unlink(os.path.join(path, entry))
            os.rmdir(path)
        except OSError:
            continue  # removed by another sweep meanwhile, or not ours to remove
        removed += 1
    if removed:
        _log.info("indexer.plan_dirs_swept", removed=removed, parent=parent)
    return removed


def _start_fork_server_deaf_to_ctrl_c() -> None:
    """Start ``multiprocessing``'s fork server (if it is not running) with
    SIGINT ignored from its first instruction: an ignored signal stays
    ignored across ``exec`` (a blocked one does not stay blocked there),
    and Python then installs no handler of its own.

    Ctrl-C reaches the whole process group; one arriving while the fork
    server's interpreter started, or imported its preloads, printed a
    traceback under the writer's one line "acms: interrupted".  The price:
    the writer ignores Ctrl-C for the spawn itself (a fork and an ``exec``,
    a few milliseconds), and one pressed just then is lost: the run goes
    on until the next.  Only the main thread sets handlers."""
    if threading.current_thread() is not threading.main_thread():
        return
    from multiprocessing import forkserver

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


class PlannerPool:
    """``jobs`` worker processes that plan batches of files (see the module doc).

    Use as a context manager; :meth:`restart` replaces a pool a dead worker broke.
    """

    def __init__(self, spec: PlannerSpec, jobs: int, *, batch_bytes: int = 256 * 1024) -> None:
        if jobs < 2:
            raise ValueError("a planner pool has at least 2 jobs (1 means in process)")
        if batch_bytes < 1:
            raise ValueError("batch_bytes must be positive")
        self.spec = spec
        self.jobs = jobs
        self.batch_bytes = batch_bytes
        self._fault = fault_from_env()
        self._nice = worker_nice_from_env()
        self._dir = make_plan_dir()
        self._listings = 0
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            own_multiprocessing_tempdir(os.path.dirname(self._dir))
            context: mp_context.ForkServerContext = (
                multiprocessing.get_context("forkserver")
                if b"__main__" in pickle.dumps(self.spec)
                else _WorkerContext()
            )
            # Imported once in the fork server, not once per worker.
            preparer = self.spec.text_preparer
            modules = [FORK_SERVER_MODULE, __name__]
            modules += [preparer.__module__] if preparer is not None else []
            context.set_forkserver_preload(modules)
            _start_fork_server_deaf_to_ctrl_c()
            self._pool = ProcessPoolExecutor(
                self.jobs,
                mp_context=context,
                initializer=_init_worker,
                initargs=(self.spec, self._fault, os.getpid(), self._nice),
            )
            _log.info("indexer.workers_started", jobs=self.jobs, method="forkserver")
        return self._pool

    @property
    def started(self) -> bool:
        """True once a batch was submitted (the workers are running)."""
        return self._pool is not None

    def listing(self, paths: Iterable[str], package: str | None = None) -> str:
        """Hand a session's listing (and the package its root is, see
        ``code_graph.root_package``) to the workers once (a file they cache)."""
        self._listings += 1
        target = Path(self._dir) / f"listing-{self._listings}.pickle"
        with open(target, "wb") as fh:
            pickle.dump((sorted(paths), package), fh, protocol=pickle.HIGHEST_PROTOCOL)
        return str(target)

    def submit(
        self, resource_id: str, listing_file: str, items: Sequence[tuple[str, bytes]]
    ) -> Future[list[Outcome]]:
        """Plan ``items`` in a worker (a pool a dead worker broke is replaced first)."""
        try:
            return self._executor().submit(_plan_in_worker, resource_id, listing_file, list(items))
        except BrokenProcessPool:
            self.restart()
            return self._executor().submit(_plan_in_worker, resource_id, listing_file, list(items))

    def restart(self) -> None:
        """Drop a pool a dead worker broke; the next submit starts a fresh one."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        processes: list[multiprocessing.process.BaseProcess] = []
        if getattr(pool, "_broken", False):
            # CPython 3.11's executor, once broken, joins the surviving workers
            # without reading their results: one blocked sending a large
            # result into the full pipe never exits, and the shutdown below
            # waits forever (seen once in the test suite).  Their work is
            # abandoned anyway (the batch is retried file by file): end them.
            with contextlib.suppress(Exception):  # the executor's thread changes it too
                processes = list((getattr(pool, "_processes", None) or {}).values())
            for process in processes:
                with contextlib.suppress(Exception):
                    process.kill()
        pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        """Stop the workers and remove the listing files."""
        self.restart()
        for name in os.listdir(self._dir):
            os.unlink(os.path.join(self._dir, name))
        os.rmdir(self._dir)

    def __enter__(self) -> PlannerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
