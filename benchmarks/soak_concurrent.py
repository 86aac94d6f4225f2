"""Soak: reader processes query all three backends for minutes while a writer
reindexes, removes a resource and rebuilds (not run by CI).

The harness and its invariants live in ``tests/integration/test_concurrent_readers.py``
(the CI test runs the same thing for 20 s)::

    python benchmarks/soak_concurrent.py --seconds 300 --readers 4

Exit status 0 when every reader query saw only committed, in-scope states,
1 otherwise; a summary line is printed either way.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))

from test_concurrent_readers import run_soak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--no-rebuild", action="store_true", help="skip the mid-run rebuild")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="acms-soak-") as tmp:
        result = run_soak(
            Path(tmp),
            seconds=args.seconds,
            readers=args.readers,
            rebuild_at=None if args.no_rebuild else 0.5,
        )
    print(result.summary())
    for line in (result.errors + result.failures)[:20]:
        print(line, file=sys.stderr)
    return 1 if result.errors or result.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
