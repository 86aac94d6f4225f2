"""``python -m cleveragents.acms``: the same as the ``acms`` console script."""

import sys

from cleveragents.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
