"""A worker process forgets the server's API key before vLLM compiles the model.

vLLM hashes every ``VLLM_*`` variable it knows into its torch.compile cache key and writes them, values included,
to ``cache_key_factors.json`` in the compile cache. vLLM 0.26 (the H200 bundle's) does not leave ``VLLM_API_KEY``
out (0.32 does), and moeperf hands each run's random key to the server as ``VLLM_API_KEY``
(``cluster/engine/api_key.py``). So every run had a compile cache key of its own, a seeded JIT cache never served
a run's first engine (on the H200, 2026-12-03: the seeded first engine compiled for 56 s and was healthy after
254 s, the next ones loaded the cache and took 89-97 s), and the key lay on disk in the run's JIT cache and in any
seed packed from it. Only the API server process checks the key; the engine core and the workers never read it.

The API server is the one process of an engine that multiprocessing did not start: with vLLM's engine in-process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``) the worker is that process and keeps the key, or the server would stop
asking for it.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import MutableMapping

API_KEY_ENV_VAR = "VLLM_API_KEY"  # the variable cluster/engine/api_key.py hands the server; vLLM's name for it


def started_by_multiprocessing() -> bool:
    return multiprocessing.parent_process() is not None


def forget_api_key(environ: MutableMapping[str, str] = os.environ, *, worker_only: bool | None = None) -> bool:
    """Drop the API key from a worker's environment; True when there was one to drop.

    ``worker_only``: whether this process serves no HTTP (default: it was started by multiprocessing)."""
    if not (started_by_multiprocessing() if worker_only is None else worker_only):
        return False
    return environ.pop(API_KEY_ENV_VAR, None) is not None
