"""A minimal agent host: ask what an agent would ask of an indexed project.

python scripts/agent_host_example.py DATA_DIR PROJECT

It only queries: index first (acms project add / resource add / reindex).
"""

import json
import sys

from cleveragents.acms import open_data_dir
from cleveragents.domain.models.acms.errors import AcmsError


def main(data_dir: str, project: str) -> int:
    session = open_data_dir(data_dir, projects=[project])
    hits = session.search("where is the inventory stored", max_results=3, budget=3000)
    if not hits["results"]:
        print(f"agent_host_example: no results: is {project} indexed?", file=sys.stderr)
        return 1
    for hit in hits["results"]:
        print(f"{hit['path']}:{hit['start_line']}-{hit['end_line']}  score {hit['score']}")
        for line in hit["lines"]:
            print(f"  {line['line']:>5}  {line['text']}")

    first = hits["results"][0]["uri"]
    print(json.dumps(session.read(first, budget=1200)["results"][:5]))
    bundle = session.context("add a method that removes an item", budget=2500)
    print(f"context: {len(bundle['results'])} snippets, truncated={bundle['truncated']}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(f"usage: {sys.argv[0]} DATA_DIR PROJECT", file=sys.stderr)
        sys.exit(2)
    try:
        sys.exit(main(sys.argv[1], sys.argv[2]))
    except (AcmsError, ValueError) as exc:
        print(f"agent_host_example: {exc}", file=sys.stderr)
        sys.exit(1)
