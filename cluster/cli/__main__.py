"""``python -m cluster.cli``: the same as the ``moeperf`` console script."""

import sys

from cluster.cli.main import main

sys.exit(main())
