"""Placement proven on a cluster Ray simulates on this machine: a CPU-only head and two worker nodes
that declare 8 GPUs and an H200 accelerator each. Engines are vLLM's CPU build at TP=1 inside the
TP=8 placement groups (the clearly named `simulate` test setting)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster
from ray.util import placement_group_table

from cluster.orchestration.driver import Driver
from experiment.config import parse_experiment
from result_format.run_result import load_run
from tests.integration.conftest import served_name_for
from tests.integration.fake_openai import loopback_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GPU_NODE = {"num_cpus": 2, "num_gpus": 8, "resources": {"accelerator_type:H200": 1}}


@pytest.fixture(scope="module")
def sim_cluster():
    # The kernel tests put Triton in interpreter mode for this process; the cluster's workers must not inherit it.
    saved = os.environ.pop("TRITON_INTERPRET", None)
    dash_port = loopback_port()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "num_gpus": 0,
            "include_dashboard": True,
            "dashboard_host": "127.0.0.1",
            "dashboard_port": dash_port,
        },
    )
    workers = [cluster.add_node(**GPU_NODE) for _ in range(2)]
    ray.init(address=cluster.address)
    try:
        yield cluster, [w.node_id for w in workers], f"http://127.0.0.1:{dash_port}"
    finally:
        ray.shutdown()
        cluster.shutdown()
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved


def experiment(tmp_path: Path, **over) -> dict:
    exp = {
        "name": "sim",
        "output_dir": str(tmp_path / "runs"),
        "model": {"served_name": served_name_for(tmp_path)},
        "engine": {
            "tensor_parallel_size": 8,
            "accelerator_type": "H200",
            "placement_timeout_s": 5,
            "cache_state": "cold_per_arm",
        },
        "simulate": {"cpu_engine_on_simulated_gpus": True, "engine_tensor_parallel_size": 1},
        "client": {"warmup_requests": 1},
        "workload": {
            "trace": {"kind": "synthetic", "num_requests": 12, "input_tokens": 16, "output_tokens": 8, "rate_rps": 6}
        },
    }
    exp.update(over)
    return exp


def run(tmp_path: Path, exp: dict):
    driver = Driver(parse_experiment(exp), None, ["pytest"])
    return driver.run()


def live_placement_groups() -> list[str]:
    return [pg["name"] for pg in placement_group_table().values() if pg["state"] != "REMOVED"]


def test_parallel_arms_get_their_own_node_and_gpus_third_arm_fails_clients_spread(sim_cluster, tmp_path):
    _, worker_ids, _ = sim_cluster
    exp = experiment(
        tmp_path,
        placement="parallel",
        arms=[{"name": "a"}, {"name": "b", "flags": {"moe_backend": "triton"}}, {"name": "c"}],
        client={"warmup_requests": 1, "actors_per_arm": 2, "placement": "spread"},
        chaos={"kill_client_after_records": {"b": 3}},
        # 11 s of sends: the kill (after 3 records) lands mid-replay even when a cold engine answers its first
        # requests late and together (at 6 requests/s client 0 could finish its whole shard first).
        workload={
            "trace": {"kind": "synthetic", "num_requests": 12, "input_tokens": 16, "output_tokens": 8, "rate_rps": 1}
        },
    )
    t0 = time.monotonic()
    res = run(tmp_path, exp)
    a, b, c = res.arms
    # Two TP=8 arms on different nodes, each with 8 distinct GPU ids of its own node.
    assert a.engine and b.engine
    assert {a.engine.node_id, b.engine.node_id} == set(worker_ids)
    for arm in (a, b):
        assert len(set(arm.engine.gpu_ids)) == 8
    # The third arm cannot fit anywhere: a clear message within its timeout, not a hang.
    assert c.status == "failed" and c.engine is None
    assert "could not reserve" in (c.failure_reason or "") and "'GPU': 1" in (c.failure_reason or "")
    assert "within 5 s" in (c.failure_reason or "")
    assert time.monotonic() - t0 < 600
    # Client actors of each arm on both worker nodes.
    for arm in (a, b):
        assert {s.node_id for s in arm.shards} == set(worker_ids)
    # Arm a: both shards complete; every request measured.
    assert a.status == "ok" and a.requests_succeeded == 12
    # Arm b lost client 0 mid-run: its finished records are kept, its shard is reported incomplete.
    lost = [s for s in b.shards if s.status == "lost"]
    assert [s.client for s in lost] == [0]
    assert b.status == "failed" and "client actor(s) [0] lost" in (b.failure_reason or "")
    assert lost[0].received < lost[0].planned
    ok_shard = next(s for s in b.shards if s.status == "ok")
    assert ok_shard.received == ok_shard.planned == 6
    b_records = load_run(Path(exp["output_dir"]) / res.run_id).arm("b").columns
    assert b.requests_succeeded == int(b_records.ok.sum()) >= 3
    assert len(b_records) == b.records_count == len(b.columns)  # what is on disk is what the result holds
    assert live_placement_groups() == []


def test_a_submitted_job_runs_interleaved_arms_and_leaves_no_placement_group(sim_cluster, tmp_path):
    """Submitted as a user submits it (JobSubmissionClient, working_dir the repo), two arms run one after the
    other on their GPU node, and every placement group is gone once the job has ended. One round: the A B B A
    order of later rounds is the driver's plan (tests/unit/test_driver_turns.py), and each extra round here
    would cost two more engine starts on a simulated cluster, the slowest thing in CI."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    _, _, dashboard = sim_cluster
    exp = experiment(
        tmp_path,
        rounds=1,
        arms=[{"name": "a"}, {"name": "b"}],
        workload={
            "trace": {"kind": "synthetic", "num_requests": 4, "input_tokens": 8, "output_tokens": 4, "rate_rps": 8}
        },
    )
    exp_path = tmp_path / "exp.yaml"
    exp_path.write_text(json.dumps(exp))  # JSON is YAML
    client = JobSubmissionClient(dashboard)
    repo = Path(__file__).resolve().parents[2]
    job = client.submit_job(
        entrypoint=f"python -m cluster.run {exp_path}",
        runtime_env={"working_dir": str(repo), "env_vars": {"TRITON_INTERPRET": "0"}},
    )
    deadline = time.monotonic() + 900
    status = client.get_job_status(job)
    while status not in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED} and time.monotonic() < deadline:
        time.sleep(1)  # polling the job API is the only way to follow a submitted job
        status = client.get_job_status(job)
    logs = client.get_job_logs(job)
    assert status == JobStatus.SUCCEEDED, logs[-3000:]
    (run_dir,) = list((tmp_path / "runs").iterdir())
    res = load_run(run_dir)
    a, b = res.arms
    assert a.status == b.status == "ok"
    assert a.rounds == b.rounds == 1
    assert a.engine is not None and a.engine.gpu_ids
    assert sorted(zip(a.columns.round.tolist(), a.columns.index.tolist(), strict=True)) == [(0, i) for i in range(4)]
    start = {(arm.name, s.round): s.start_epoch_s for arm in (a, b) for s in arm.shards}
    assert start[("a", 0)] < start[("b", 0)]  # interleaved: one arm after the other, never at once
    assert live_placement_groups() == []


def test_plan_places_two_tp8_arms_and_refuses_the_third(sim_cluster, tmp_path):
    from cluster.placement.plan import cluster_nodes, make_plan, render

    _, worker_ids, _ = sim_cluster
    cfg = parse_experiment(
        experiment(
            tmp_path,
            placement="parallel",
            arms=[{"name": "a"}, {"name": "b"}, {"name": "c"}],
            client={"actors_per_arm": 4, "placement": "spread"},
        )
    )
    nodes = cluster_nodes()
    plans = make_plan(cfg, "cuda", nodes)
    assert {p.node_id for p in plans[:2]} == set(worker_ids)
    assert plans[2].missing is not None and "GPU" in plans[2].missing
    assert sorted(set(plans[0].client_nodes)) == sorted(worker_ids)
    text = render(cfg, "cuda", nodes, plans, peak_rps=450.0)
    assert "CANNOT PLACE" in text and "at least 3 client actor(s)" in text
    interleaved = make_plan(cfg.model_copy(update={"placement": "interleaved"}), "cuda", nodes)
    assert all(p.missing is None for p in interleaved)
