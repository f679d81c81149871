"""A worker process forgets the server's API key before vLLM compiles (vLLM 0.26 hashes VLLM_API_KEY into its
compile cache key and writes it to disk); the process that serves HTTP, the one multiprocessing did not start,
keeps it, or the server would stop asking for it."""

import multiprocessing
import os

import pytest

from cluster.engine.api_key import API_KEY_ENV_VAR, with_api_key
from moe_opt.plugin.credentials import forget_api_key


def _child_forgets(queue: "multiprocessing.Queue[tuple[bool, str | None]]") -> None:
    queue.put((forget_api_key(), os.environ.get(API_KEY_ENV_VAR)))


def test_a_process_multiprocessing_started_forgets_the_key_it_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    """As vLLM starts its engine core and workers: a spawned child with the server's environment."""
    monkeypatch.setenv(API_KEY_ENV_VAR, "k-inherited")
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_forgets, args=(queue,))
    child.start()
    dropped, left = queue.get(timeout=120)
    child.join(timeout=120)
    assert (dropped, left) == (True, None)
    assert os.environ[API_KEY_ENV_VAR] == "k-inherited"  # the parent, which serves HTTP, still has it


def test_the_serving_process_keeps_the_key_and_a_worker_without_one_changes_nothing() -> None:
    served = with_api_key({"PATH": "/bin"}, "k1")  # the environment the server is spawned with
    assert forget_api_key(served) is False and served[API_KEY_ENV_VAR] == "k1"  # pytest: not a multiprocessing child
    assert forget_api_key(served, worker_only=True) is True and served == {"PATH": "/bin"}
    assert forget_api_key(served, worker_only=True) is False and served == {"PATH": "/bin"}
