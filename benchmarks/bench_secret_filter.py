"""What the secret filter costs: listing with the deny-list vs without, and
content scanning vs reading the same files.

    python benchmarks/bench_secret_filter.py [PATH] [--repeat N]

PATH defaults to the interpreter's standard library, listed as a plain
directory.  Every figure is a median over ``--repeat`` runs with its
reference measured in the same process on the same files; read the ratios.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from cleveragents.application.services.resource_files import list_resource, read_file
from cleveragents.domain.models.acms.secret_filter import DEFAULT_SECRET_FILTER, SecretFilter


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", nargs="?", default=sysconfig.get_paths()["stdlib"])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    root = Path(args.path)
    off = SecretFilter(enabled=False)

    listing = list_resource(root, "directory")
    print(
        f"{root}: {len(listing.files)} files listed, "
        f"{len(listing.secret_skipped)} left out as secrets by name"
    )
    with_filter = median_seconds(lambda: list_resource(root, "directory"), args.repeat)
    without = median_seconds(lambda: list_resource(root, "directory", secrets=off), args.repeat)
    print(
        f"listing: with deny-list {with_filter * 1000:.1f} ms, without {without * 1000:.1f} ms "
        f"-> {with_filter / without:.2f}x"
    )

    datas = []
    for f in listing.files:
        read = read_file(root, f, max_bytes=1024 * 1024)
        if read is not None:
            datas.append((f.rel_path, read.data))
    total = sum(len(d) for _, d in datas)

    def read_all() -> None:
        for f in listing.files:
            read_file(root, f, max_bytes=1024 * 1024)

    def scan_all() -> list[str]:
        return [p for p, d in datas if DEFAULT_SECRET_FILTER.content_rule(p, d)]

    hits = scan_all()
    reading = median_seconds(read_all, args.repeat)
    scanning = median_seconds(scan_all, args.repeat)
    print(
        f"content: scan {total / scanning / 1e6:.0f} MB/s ({scanning * 1000:.0f} ms), "
        f"reading the same {total / 1e6:.1f} MB {reading * 1000:.0f} ms "
        f"-> scan/read {scanning / reading:.2f}x; {len(hits)} file(s) with a token: {hits[:5]}"
    )


if __name__ == "__main__":
    main()
