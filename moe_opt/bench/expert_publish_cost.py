"""What publishing the per-expert token counts costs the engine's process: host time per publish, under its GIL.

Why: the count itself runs on the device (``expert_load_cost.py``), but once a second the harvester thread turns
the device's snapshot into one ``prometheus_client`` counter increment per (layer, expert) that grew. With uniform
routing every counter grows, so Qwen3-30B-A3B's 48 x 128 means 6,144 increments a second, in multiprocess mode
(mmap writes), in a thread of the engine's own process (the worker at TP=1), holding the GIL that the step loop
wants back. On the H200 two engines of one setting differed by 5-10% with uniform routing and by 1.5% with the
collapsed routing (384 counters growing), so this time is a suspect worth a number. It times ``Harvester._publish``
as the plugin runs it: the real metric (its spec in ``moe_opt/plugin/metrics.py``) published through the plugin's own
``counter_publish``, with every counter grown.

    python -m moe_opt.bench.expert_publish_cost --out moe_opt/bench/results/expert_publish_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from moe_opt.bench.env_info import environment
from moe_opt.bench.shapes import SHAPES
from moe_opt.plugin.expert_harvest import PERIOD_S, Harvester, counter_publish
from moe_opt.plugin.expert_load import DeviceCounts, MoeLayer
from moe_opt.plugin.metrics import EXPERT_TOKENS, RANK_LABELS, create, spec

MOE_LAYERS = {"qwen3-30b-a3b": 48, "mixtral-8x7b": 32, "deepseek-v3": 58}
"""MoE layers of each model (DeepSeek-V3: 61 decoder layers, the first 3 dense); the shapes table holds one layer."""


def _harvester(num_layers: int, num_experts: int, top_k: int) -> Harvester:
    layers = [MoeLayer(i, f"model.layers.{i}.mlp.experts", num_experts, top_k, False) for i in range(num_layers)]
    counts = DeviceCounts(layers, torch.device("cpu"), max_tokens=0)
    import prometheus_client

    metric = create(spec(EXPERT_TOKENS), registry=prometheus_client.CollectorRegistry())  # one per shape
    lv = tuple("0" if name == "rank" else f"bench-{name}-{num_layers}x{num_experts}" for name in RANK_LABELS)
    return Harvester(counts, counter_publish(metric, lv, layers))


def time_publish_ms(num_layers: int, num_experts: int, top_k: int, trials: int) -> list[float]:
    """Milliseconds per publish with every (layer, expert) counter grown since the last one."""
    h = _harvester(num_layers, num_experts, top_k)
    snapshot = torch.zeros(num_layers, num_experts + 1, dtype=torch.int64)
    h._publish(snapshot)  # noqa: SLF001 - the method the harvester's thread runs, timed as it runs
    out = []
    for _ in range(trials):
        snapshot = snapshot + torch.randint(1, 64, snapshot.shape)
        snapshot[:, -1] = 0  # the spare column (ids out of range) stays empty, as in an engine
        t0 = time.perf_counter()
        h._publish(snapshot)  # noqa: SLF001
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--shapes", nargs="+", default=list(MOE_LAYERS), choices=sorted(MOE_LAYERS))
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="moeperf-publish-"))
    rows: list[dict[str, Any]] = []
    for name in args.shapes:
        s = SHAPES[name]
        layers = MOE_LAYERS[name]
        trials = time_publish_ms(layers, s.num_experts, s.top_k, args.trials)
        rows.append(
            {
                "shape": name,
                "layers": layers,
                "experts": s.num_experts,
                "counters_per_publish": layers * s.num_experts,
                "publish_ms_median": statistics.median(trials),
                "publish_ms_max": max(trials),
                "share_of_the_period_pct": statistics.median(trials) / (10 * PERIOD_S),  # one publish per PERIOD_S
                "trials_ms": trials,
            }
        )
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "trials_ms"}))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    out = {"benchmark": "expert_publish_cost", "environment": environment(), "rows": rows}
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
