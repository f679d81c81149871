"""``python -m cluster.run [experiment.yaml] [overrides]``: the entry point for ``ray job submit``."""

from __future__ import annotations

import sys

from cluster.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
