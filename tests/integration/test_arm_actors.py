"""An arm's actors failing under it, on a real Ray: each fails the arm with the reason, none escapes or hangs.

A dead EngineActor is a real one, killed or refused by its own constructor (no vLLM server is needed to
show how its death is reported). A client that neither yields nor ends is a stand-in for a stuck
ClientActor, since a real one cannot be made to hang on demand: the client cancels its replay at its
deadline and says so (tests/integration/test_client_faults.py); this is the driver's backstop for a
client that cannot (a stuck event loop, a partitioned node).
"""

import asyncio
import threading
import time

import pytest
import ray

from cluster.engine.actor import EngineActor
from cluster.orchestration.arm_runner import ArmRunner, _Round
from cluster.orchestration.fault_injection import NO_FAULTS
from experiment.config import EngineSpec, parse_experiment
from result_format.run_result import EngineInfo
from tests.integration.conftest import records_on_disk
from workloads.client import ClientSettings
from workloads.records import RequestRecord
from workloads.schedule import PlannedRequest
from workloads.schedule_columns import ScheduleColumns

pytestmark = pytest.mark.integration

HANG_GUARD_S = 120.0


class StuckClient:
    """Hands out the first request's record, then never yields again and never ends."""

    async def ready(self) -> bool:
        return True

    async def replay(self, requests, settings, start_epoch_s):
        first = ScheduleColumns.from_arrays(requests).request(0)  # the shard comes as columns
        yield [
            RequestRecord(
                index=first.index,
                arm=settings.arm,
                intended_send_s=0.0,
                actual_send_s=0.0,
                end_s=0.01,
                prompt_tokens_requested=first.prompt_tokens,
                output_tokens_requested=first.max_tokens,
            ).model_dump()
        ]
        await asyncio.Event().wait()


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=1, include_dashboard=False)
    yield
    ray.shutdown()


def test_a_client_that_never_ends_is_cut_off_after_its_deadline_and_its_records_kept(local_ray, tmp_path):
    cfg = parse_experiment({"arms": [{"name": "a"}], "client": {"request_timeout_s": 1.0}})
    requests = [PlannedRequest(index=i, send_offset_s=0.0, prompt_tokens=2, max_tokens=2) for i in range(3)]
    runner = ArmRunner(cfg, cfg.arms[0], "cpu", tmp_path / "run", requests, on_records=lambda *a: None)
    runner.deadline_margin_s, runner.client_grace_s = 0.0, 2.0  # gives up 1 s + 2 s after the start
    client = ray.remote(StuckClient).options(num_cpus=0).remote()
    ray.get(client.ready.remote())
    runner.clients, runner.client_nodes = [client], [ray.get_runtime_context().get_node_id()]
    settings = ClientSettings(
        base_url="http://unused", model="m", arm="a", vocab_lo=3, vocab_hi=9, request_timeout_s=1.0
    )
    consumer = threading.Thread(
        target=runner._consume_shard, args=(_Round(0, time.time(), settings, runner.levels[0], NO_FAULTS), 0)
    )
    consumer.start()
    consumer.join(timeout=HANG_GUARD_S)  # only turns the bug under test (a hang) into a failure
    assert not consumer.is_alive(), "the driver is still waiting on a client that will never end"
    (shard,) = runner.shards
    assert shard.status == "lost" and shard.planned == 3 and shard.received == 1
    assert shard.error == (
        "replay deadline passed: client actor 0 had not ended 2 s past its replay deadline (1 s after the start); "
        "cut off"
    )
    assert runner.records.kept == 1
    assert [r["index"] for r in records_on_disk(runner.records.journal.path)] == [0]


def runner_with_engine(tmp_path, engine_spec: EngineSpec, kill: bool) -> ArmRunner:
    cfg = parse_experiment({"arms": [{"name": "a"}]})
    requests = [PlannedRequest(index=0, send_offset_s=0.0, prompt_tokens=2, max_tokens=2)]
    runner = ArmRunner(cfg, cfg.arms[0], "cpu", tmp_path / "run", requests, on_records=lambda *a: None)
    engine = (
        ray.remote(EngineActor).options(num_cpus=0).remote("run", "a", runner.flags, cfg.model, engine_spec, "cpu", [])
    )
    if kill:
        ray.get(engine.poll.remote())  # alive first, so what is reported is the kill
        ray.kill(engine)
    runner.engine = engine
    runner.info = EngineInfo(
        url="http://127.0.0.1:9", node_id="n", pid=1, device="cpu", gpu_ids=[], tensor_parallel_size=1,
        vllm_version="v", torch_version="t", argv=[], env={}, startup_s=1.0,
    )  # fmt: skip
    return runner


def test_a_killed_engine_actor_fails_its_arm_in_the_replay_and_between_rounds_without_raising(local_ray, tmp_path):
    runner = runner_with_engine(tmp_path, EngineSpec(cache_state="as_found"), kill=True)
    # As the driver does it; ray.kill is asynchronous, so the counters' read may still be answered, the round not.
    if runner.open_round(0):
        runner.replay(0, time.time())  # returns: the driver goes on to the next arm
    assert runner.failure is not None
    assert runner.failure[0] == (
        "engine actor died: The actor died unexpectedly before finishing this task. "
        "The actor is dead because it was killed by `ray.kill`."
    )
    runner.failure = None
    assert runner.between_rounds() is False and runner.failure[0].startswith("engine actor died: ")
    runner.stop()  # stopping a dead actor's arm raises nothing either
    result = runner.result()
    assert result.status == "failed" and result.failure_reason.startswith("engine actor died: ")


def test_an_engine_actor_whose_constructor_raised_says_what_it_raised(local_ray, tmp_path):
    runner = runner_with_engine(tmp_path, EngineSpec(cache_state="shared_warm"), kill=False)  # no jit_cache_dir
    assert runner.open_round(0) is False
    assert runner.failure is not None
    reason = runner.failure[0]
    assert reason.startswith("engine actor died: its constructor raised cluster.engine.command.MissingSharedJitCache")
    assert "jit_cache_dir" in reason and "\x1b" not in reason
