"""A minimal agent host: index a repository, then ask what an agent would ask.

python scripts/agent_host_example.py DATA_DIR PROJECT
"""

import json
import sys

from cleveragents.acms import open_data_dir

data_dir, project = sys.argv[1], sys.argv[2]
session = open_data_dir(data_dir, projects=[project])

hits = session.search("where is the inventory stored", max_results=3, budget=3000)
for hit in hits["results"]:
    print(f"{hit['path']}:{hit['start_line']}-{hit['end_line']}  score {hit['score']}")
    for line in hit["lines"]:
        print(f"  {line['line']:>5}  {line['text']}")

first = hits["results"][0]["uri"]
print(json.dumps(session.read(first, budget=1200)["results"][:5]))
bundle = session.context("add a method that removes an item", budget=2500)
print(f"context: {len(bundle['results'])} snippets, truncated={bundle['truncated']}")
