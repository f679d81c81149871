"""Tokens per expert per MoE layer: the count on vLLM's real routers, its read-back, and the result's rows.

The routers are the installed vLLM's own ``CPURouter`` (what the CPU build's MoE layers route with), called through
``FusedMoERouter.select_experts`` exactly as ``MoERunner`` calls it; the modules holding them are plain torch modules
with the two attributes a ``MoERunner`` has (``layer_name``, ``router``).
"""

from __future__ import annotations

import types
from collections.abc import Iterator

import pytest
import torch

from cluster.engine.counters import UNPUBLISHED, expert_counts, parse_samples, settled_scrape, unpublished_ranks
from cluster.engine.observed import expert_load_in_window, without_expert_series
from cluster.orchestration.combine import _sum_expert_load
from moe_opt.plugin.expert_harvest import Harvester
from moe_opt.plugin.expert_load import (
    MARK,
    ROUTER_CLASS,
    ROUTER_METHOD,
    ROUTER_MODULE,
    RUNNER_CLASS,
    RUNNER_METHOD,
    DeviceCounts,
    MoeLayer,
    Slot,
    activate,
    activate_biases,
    find_moe_layers,
    install_router_hook,
    install_runner_join,
    layer_number,
)
from moe_opt.plugin.metrics import EXPERT_TOKENS, EXPERT_TOKENS_UNPUBLISHED
from moe_opt.plugin.patches import PatchTargetMissing
from moe_opt.plugin.router_bias import LayerBiases, RouterBias, parse_router_bias
from moe_opt.plugin.settings import PluginConfigError, load_settings
from result_format.run_result import ExpertLoad, series_key

E, K = 8, 2


def test_the_layer_number_comes_from_the_prefix() -> None:
    assert layer_number("model.layers.12.mlp.experts") == 12
    assert layer_number("model.layers.0.block_sparse_moe.experts") == 0
    assert layer_number("language_model.model.layers.7.mlp.experts") == 7
    assert layer_number("model.mtp.experts") is None
    assert layer_number("model.sublayers.3.experts") is None


def test_a_vllm_without_the_router_method_stops_the_worker_naming_its_version() -> None:
    def no_class(name: str) -> types.ModuleType:
        return types.ModuleType(name)

    with pytest.raises(PatchTargetMissing) as e:
        install_router_hook("9.9.9", import_module=no_class)
    assert e.value.flag == "instruments" and "vLLM 9.9.9" in str(e.value)
    assert f"{ROUTER_CLASS}.{ROUTER_METHOD}" in e.value.target

    def gone(name: str) -> types.ModuleType:
        raise ImportError(name)

    with pytest.raises(PatchTargetMissing) as e:
        install_router_hook("9.9.9", import_module=gone)
    assert e.value.target == ROUTER_MODULE


class _Runner(torch.nn.Module):
    """What find_moe_layers reads of vLLM's MoERunner: its prefix and its router."""

    def __init__(self, name: str, router: object) -> None:
        super().__init__()
        self.layer_name = name
        self.router = router


@pytest.fixture
def routers() -> Iterator[list[object]]:
    pytest.importorskip("vllm")
    from vllm.model_executor.layers.fused_moe.router.cpu_router import CPURouter

    install_router_hook("installed")
    yield [CPURouter(top_k=K, global_num_experts=E) for _ in range(3)]
    activate(None)
    activate_biases(None)


def _bound(rs: list[object], names: list[str], max_tokens: int = 64) -> tuple[DeviceCounts, list[MoeLayer]]:
    model = torch.nn.ModuleList([_Runner(n, r) for n, r in zip(names, rs, strict=True)])
    found = find_moe_layers(model)
    counts = DeviceCounts([layer for layer, _ in found], "cpu", max_tokens)
    counts.bind(router for _, router in found)
    activate(counts)
    return counts, [layer for layer, _ in found]


def _route(router: object, tokens: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    _, ids = router.select_experts(torch.randn(tokens, 16, generator=g), torch.randn(tokens, E, generator=g))  # type: ignore[attr-defined]
    return ids


def test_the_hook_is_installed_once_on_the_installed_vllm(routers: list[object]) -> None:
    from vllm.model_executor.layers.fused_moe.router.fused_moe_router import FusedMoERouter

    select = FusedMoERouter.__dict__[ROUTER_METHOD]
    assert getattr(select, MARK, False)
    install_router_hook("installed")
    assert FusedMoERouter.__dict__[ROUTER_METHOD] is select


def test_each_real_router_adds_exactly_the_experts_it_selected_into_its_layers_row(routers: list[object]) -> None:
    counts, layers = _bound(routers, ["model.layers.5.mlp.experts", "model.layers.1.mlp.experts", "model.layers.3.x"])
    assert [layer.number for layer in layers] == [1, 3, 5]  # model order from the prefix, not module order
    assert all(layer.num_experts == E and layer.top_k == K and not layer.guarded for layer in layers)
    assert counts.counts.shape == (3, E + 1) and counts.counts.dtype == torch.int64
    ids = _route(routers[0], 7, seed=1)  # the router of layer 5: row 2
    assert torch.equal(counts.counts[2, :E], torch.bincount(ids.reshape(-1).long(), minlength=E))
    assert counts.counts[:2].sum() == 0 and counts.counts[:, E].sum() == 0
    more = _route(routers[0], 4, seed=2)
    assert int(counts.counts[2].sum()) == (7 + 4) * K
    both = torch.cat([ids.reshape(-1), more.reshape(-1)]).long()
    assert torch.equal(counts.counts[2, :E], torch.bincount(both, minlength=E))


def test_padding_rows_of_a_step_are_not_counted(routers: list[object]) -> None:
    counts, _ = _bound(routers[:1], ["model.layers.0.mlp.experts"])
    counts.set_real_tokens(3)
    ids = _route(routers[0], 5, seed=3)  # a batch of 3 real tokens padded to 5
    assert torch.equal(counts.counts[0, :E], torch.bincount(ids[:3].reshape(-1).long(), minlength=E))
    counts.set_real_tokens(5)
    _route(routers[0], 5, seed=4)
    assert int(counts.counts[0].sum()) == (3 + 5) * K


def test_nothing_is_counted_for_an_unbound_router_or_with_counting_off(routers: list[object]) -> None:
    counts, _ = _bound(routers[:1], ["model.layers.0.mlp.experts"])
    _route(routers[1], 4, seed=5)
    assert counts.counts.sum() == 0
    activate(None)
    _route(routers[0], 4, seed=6)
    assert counts.counts.sum() == 0


def test_layers_without_a_number_in_their_prefix_are_numbered_in_model_order(routers: list[object]) -> None:
    _, layers = _bound(routers[:2], ["decoder.moe_b", "decoder.moe_a"])
    assert [(layer.number, layer.name) for layer in layers] == [(0, "decoder.moe_b"), (1, "decoder.moe_a")]


def test_ids_out_of_range_of_a_guarded_router_go_to_the_spare_column() -> None:
    layer = MoeLayer(0, "model.layers.0.mlp.experts", E, K, guarded=True)
    counts = DeviceCounts([layer], "cpu", 8)
    Slot(counts, 0, layer).add(torch.tensor([[0, -1], [E, 3]], dtype=torch.int32))
    assert counts.counts[0].tolist() == [1, 0, 0, 1, 0, 0, 0, 0, 2]


def test_a_batch_beyond_max_num_batched_tokens_is_counted_unweighted() -> None:
    layer = MoeLayer(0, "model.layers.0.mlp.experts", E, K, guarded=False)
    counts = DeviceCounts([layer], "cpu", 2)
    counts.set_real_tokens(1)
    Slot(counts, 0, layer).add(torch.zeros((3, K), dtype=torch.int64))
    assert int(counts.counts[0, 0]) == 3 * K


class _Published:
    def __init__(self) -> None:
        self.total: dict[tuple[int, int], int] = {}
        self.calls = 0

    def __call__(self, row: int, expert: int, tokens: int) -> None:
        assert tokens > 0
        self.calls += 1
        self.total[(row, expert)] = self.total.get((row, expert), 0) + tokens

    def as_tensor(self, shape: tuple[int, ...]) -> torch.Tensor:
        out = torch.zeros(shape, dtype=torch.int64)
        for (r, e), n in self.total.items():
            out[r, e] = n
        return out


def test_start_up_routing_is_forgotten_and_an_idle_rank_publishes_everything_served(routers: list[object]) -> None:
    counts, _ = _bound(routers[:2], ["model.layers.0.mlp.experts", "model.layers.1.mlp.experts"])
    published = _Published()
    flags: list[bool] = []
    h = Harvester(counts, published, period_s=3600.0, unpublished=flags.append, idle_s=0.0)
    _route(routers[0], 6, seed=7)  # profiling / warm-up before the first served step
    assert not h.harvest() and published.calls == 0  # not serving yet: the thread touches nothing
    assert flags == []
    h.begin(4)
    assert flags == [True]  # the first step marks the counter incomplete
    assert counts.counts.sum() == 0  # zeroed at the first served step
    for r in routers[:2]:
        _route(r, 4, seed=8)
    assert not h.harvest()  # a step is open: no copy from the thread
    h.end()
    assert flags == [True]
    assert h.harvest()  # idle: copies and publishes what the step routed
    assert flags == [True, False]  # complete: a reader may take its window now
    assert torch.equal(published.as_tensor(tuple(counts.counts.shape)), counts.counts)
    assert [sum(n for (r, _), n in published.total.items() if r == row) for row in (0, 1)] == [4 * K, 4 * K]
    calls = published.calls
    assert not h.harvest() and published.calls == calls  # nothing new: nothing published
    h.begin(2)
    _route(routers[1], 2, seed=9)
    h.end()
    assert h.harvest()
    assert torch.equal(published.as_tensor(tuple(counts.counts.shape)), counts.counts)


def test_while_serving_a_snapshot_is_taken_between_steps_and_published_by_the_thread(routers: list[object]) -> None:
    counts, _ = _bound(routers[:1], ["model.layers.0.mlp.experts"])
    published = _Published()
    flags: list[bool] = []
    h = Harvester(counts, published, period_s=0.0, unpublished=flags.append, idle_s=0.0)
    h.begin(3)
    _route(routers[0], 3, seed=10)
    h.end()
    h.begin(3)  # the period passed: this step's boundary queues a copy of everything before it
    _route(routers[0], 3, seed=11)  # routed after the snapshot
    assert h.harvest()  # the pending snapshot is published although a step is open
    assert sum(published.total.values()) == 3 * K
    assert flags == [True]  # the open step is not in it: still incomplete
    h.end()
    assert h.harvest()  # idle again: the thread copies the rest itself
    assert sum(published.total.values()) == 6 * K
    assert flags == [True, False]


def test_a_rank_that_stepped_a_moment_ago_is_not_idle(routers: list[object]) -> None:
    counts, _ = _bound(routers[:1], ["model.layers.0.mlp.experts"])
    h = Harvester(counts, _Published(), period_s=3600.0, idle_s=3600.0)
    h.begin(2)
    h.end()
    assert not h.harvest()  # between two steps of a busy rank: the step thread's own copies serve it


def test_counting_is_on_unless_switched_off() -> None:
    env = {"MOEPERF_ARM_FLAGS": "{}"}
    on = load_settings(env)
    off = load_settings({**env, "MOEPERF_EXPERT_LOAD": "0"})
    overlap = load_settings({**env, "MOEPERF_EXPERT_LOAD": "overlap"})
    assert on is not None and on.expert_load and not on.expert_load_overlap
    assert off is not None and not off.expert_load
    assert overlap is not None and overlap.expert_load and overlap.expert_load_overlap
    with pytest.raises(PluginConfigError, match="MOEPERF_EXPERT_LOAD='side'"):
        load_settings({**env, "MOEPERF_EXPERT_LOAD": "side"})


def test_the_layer_join_is_installed_once_on_the_installed_vllm() -> None:
    pytest.importorskip("vllm")
    from vllm.model_executor.layers.fused_moe.runner.moe_runner import MoERunner

    install_runner_join("installed")
    apply = MoERunner.__dict__[RUNNER_METHOD]
    assert getattr(apply, MARK, False)
    install_runner_join("installed")
    assert MoERunner.__dict__[RUNNER_METHOD] is apply


def test_a_vllm_without_the_layer_method_stops_the_worker_naming_its_version() -> None:
    with pytest.raises(PatchTargetMissing) as e:
        install_runner_join("9.9.9", import_module=types.ModuleType)
    assert "vLLM 9.9.9" in str(e.value) and f"{RUNNER_CLASS}.{RUNNER_METHOD}" in e.value.target


def test_a_count_inside_a_moe_layer_is_joined_when_the_layer_returns_and_one_outside_runs_inline(
    routers: list[object],
) -> None:
    """Overlap mode forks a count only where a join will follow before the layer (and the captured piece) ends."""

    class MoERunner:  # what the join wraps: the method that routes and runs the experts of one layer
        def __init__(self, router: object) -> None:
            self.router = router

        def _apply_quant_method(self, tokens: int) -> torch.Tensor:
            ids = _route(self.router, tokens, seed=tokens)
            events.append("experts")
            return ids

    fake = types.ModuleType("moe_runner")
    fake.MoERunner = MoERunner  # type: ignore[attr-defined]
    install_runner_join("fake", import_module=lambda name: fake)
    counts, _ = _bound(routers[:1], ["model.layers.0.mlp.experts"])
    events: list[str] = []
    count, join = counts.count, counts.join

    def spy_count(slot: Slot, ids: torch.Tensor, joined_later: bool) -> None:
        events.append(f"count joined_later={joined_later}")
        count(slot, ids, joined_later)

    def spy_join() -> None:
        events.append("join")
        join()

    counts.count, counts.join = spy_count, spy_join  # type: ignore[method-assign,assignment]

    ids = MoERunner(routers[0])._apply_quant_method(5)
    assert events == ["count joined_later=True", "experts", "join"]
    events.clear()
    _route(routers[0], 3, seed=1)  # routed outside a layer: nothing would join it
    assert events == ["count joined_later=False"]
    assert int(counts.counts[0].sum()) == (5 + 3) * K and counts.side is None  # on CPU: counted inline, no stream
    assert bool((torch.bincount(ids.reshape(-1), minlength=E)[:E] <= counts.counts[0][:E]).all())


def _key(rank: int, layer: int, expert: int) -> str:
    labels = {"engine": "e", "arm": "a", "node": "n", "rank": str(rank), "gpu": "none", "gpu_uuid": "none"}
    return series_key(EXPERT_TOKENS, {**labels, "layer": str(layer), "expert": str(expert)})


def test_expert_load_is_the_windows_growth_of_the_lowest_rank_with_every_expert() -> None:
    known = [_key(r, layer, e) for r in (0, 1) for layer in (3, 1) for e in range(4)]
    window = {
        _key(0, 1, 0): 5.0,
        _key(0, 1, 2): 3.0,
        _key(1, 1, 0): 5.0,  # rank 1 routes identically: not added
        _key(1, 1, 2): 3.0,
        _key(0, 3, 1): 8.0,
        'vllm:generation_tokens_total{engine="e"}': 100.0,
    }
    rows = expert_load_in_window(window, known)
    assert rows == [ExpertLoad(layer=1, tokens=[5, 0, 3, 0]), ExpertLoad(layer=3, tokens=[0, 8, 0, 0])]
    assert expert_load_in_window({}, []) == []
    # A pipeline stage: layer 7 lives on rank 1 only.
    assert expert_load_in_window({_key(1, 7, 1): 2.0}, [_key(1, 7, 2)]) == [ExpertLoad(layer=7, tokens=[0, 2, 0])]


def test_the_result_keeps_the_expert_series_as_expert_load_not_in_window_metrics() -> None:
    window = {_key(0, 1, 0): 5.0, 'moeperf_expert_tokens_unpublished{rank="0"}': 0.0, 'vllm:x_total{a="b"}': 2.0}
    assert without_expert_series(window) == {
        'moeperf_expert_tokens_unpublished{rank="0"}': 0.0,
        'vllm:x_total{a="b"}': 2.0,
    }
    assert expert_load_in_window(window) == [ExpertLoad(layer=1, tokens=[5])]


def test_combined_runs_add_their_expert_load_per_layer() -> None:
    a = [ExpertLoad(layer=0, tokens=[1, 2]), ExpertLoad(layer=1, tokens=[3, 0])]
    b = [ExpertLoad(layer=0, tokens=[10, 20, 5])]
    assert _sum_expert_load([a, b, []]) == [
        ExpertLoad(layer=0, tokens=[11, 22, 5]),
        ExpertLoad(layer=1, tokens=[3, 0]),
    ]


def test_the_runner_waits_for_exactly_the_ranks_whose_counts_are_unpublished() -> None:
    text = (
        "# HELP moeperf_expert_tokens_unpublished x\n# TYPE moeperf_expert_tokens_unpublished gauge\n"
        'moeperf_expert_tokens_unpublished{rank="0",arm="a"} 0.0\n'
        'moeperf_expert_tokens_unpublished{rank="1",arm="a"} 1.0\n'
        'moeperf_expert_tokens_unpublished{rank="3",arm="a"} 1.0\n'
        "# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0"} 1.0\n'
    )
    assert unpublished_ranks(text) == ["1", "3"]
    assert unpublished_ranks(text.replace("} 1.0\n", "} 0.0\n")) == []
    assert unpublished_ranks("") == []  # an engine without the plugin: nothing to wait for
    assert UNPUBLISHED == EXPERT_TOKENS_UNPUBLISHED  # the harness reads the name the plugin writes


def _metrics_text(tokens: list[int], unpublished: int) -> str:
    """One rank's expert counts and flag as prometheus_client writes them (what vLLM's /metrics serves)."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

    reg = CollectorRegistry()
    counter = Counter(EXPERT_TOKENS.removesuffix("_total"), "x", ["rank", "layer", "expert"], registry=reg)
    for e, n in enumerate(tokens):
        counter.labels("0", "0", str(e)).inc(n)
    Gauge(UNPUBLISHED, "x", ["rank"], registry=reg).labels("0").set(unpublished)
    return generate_latest(reg).decode()


def test_a_window_is_read_only_once_the_published_counts_stopped_changing() -> None:
    """The torn scrape CI met: vLLM's multiprocess /metrics reads the counter file, the rank publishes its last
    steps and clears its flag, then the gauge file is read: old counts beside a cleared flag. The read must go on
    to the counts the publish wrote."""
    scrapes = iter([
        _metrics_text([5, 3], unpublished=1),  # the last steps not yet published
        _metrics_text([5, 3], unpublished=0),  # torn: the counts from before the publish, the flag from after it
        _metrics_text([9, 4], unpublished=0),
        _metrics_text([9, 4], unpublished=0),
    ])  # fmt: skip
    calls: list[str] = []

    def scrape() -> str:
        calls.append(text := next(scrapes))
        return text

    timed_out: list[list[str]] = []
    got = settled_scrape(scrape, timeout_s=60.0, poll_s=0.0, on_timeout=timed_out.append)
    assert list(expert_counts(got.samples).values()) == [9.0, 4.0] and len(calls) == 4 and timed_out == []
    assert got.text == calls[-1] and got.samples == parse_samples(got.text)  # the window reads the settled scrape


def test_a_window_read_does_not_wait_on_an_engine_without_expert_counts_and_gives_up_at_its_deadline() -> None:
    plain = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n"
    calls: list[str] = []
    assert settled_scrape(lambda: calls.append(plain) or plain, timeout_s=60.0, poll_s=0.0).text == plain
    assert len(calls) == 1
    stuck = _metrics_text([1, 1], unpublished=1)
    timed_out: list[list[str]] = []
    got = settled_scrape(lambda: stuck, timeout_s=0.0, poll_s=0.0, on_timeout=timed_out.append)
    assert got.text == stuck and got.samples == parse_samples(stuck) and got.pending_ranks == ["0"]
    assert timed_out == [["0"]]


def test_the_router_bias_is_parsed_strictly() -> None:
    env = {"MOEPERF_ARM_FLAGS": "{}"}
    s = load_settings({**env, "MOEPERF_ROUTER_BIAS": "zipf:1.2:7"})
    assert s is not None and s.router_bias == RouterBias("zipf", 1.2, 7)
    assert parse_router_bias("zipf:2") == RouterBias("zipf", 2.0, None) and parse_router_bias("") is None
    assert parse_router_bias("uniform") == RouterBias("uniform", 0.0)
    for bad in ("uniform:1", "Uniform", "zipf", "zipf:-1", "zipf:x", "zipf:1:2:3"):
        with pytest.raises(PluginConfigError, match="MOEPERF_ROUTER_BIAS"):
            load_settings({**env, "MOEPERF_ROUTER_BIAS": bad})


def test_a_zipf_bias_ranks_experts_by_log_popularity_reproducibly() -> None:
    plain = RouterBias("zipf", 1.0).logits(4, layer=0)
    assert torch.allclose(plain, -torch.log(torch.tensor([1.0, 2.0, 3.0, 4.0])))
    seeded = RouterBias("zipf", 1.0, seed=3)
    a, b = seeded.logits(16, layer=0), seeded.logits(16, layer=1)
    assert torch.equal(a, seeded.logits(16, layer=0))  # same seed and layer: same ranking
    assert not torch.equal(a, b) and torch.equal(a.sort().values, b.sort().values)  # a permutation per layer


def test_a_strong_bias_routes_every_token_to_the_most_popular_experts(routers: list[object]) -> None:
    counts, layers = _bound(routers[:2], ["model.layers.0.mlp.experts", "model.layers.1.mlp.experts"])
    biases = LayerBiases()
    bias = RouterBias("zipf", 50.0, seed=1)
    for layer, router in zip(layers, routers[:2], strict=True):
        biases.bind(router, bias.logits(E, layer.number), "cpu")
    activate_biases(biases)
    try:
        _route(routers[0], 9, seed=12)
        _route(routers[1], 9, seed=13)
    finally:
        activate_biases(None)
    for row, layer in enumerate(layers):
        favourite = set(torch.topk(bias.logits(E, layer.number), K).indices.tolist())
        assert {e for e in range(E) if counts.counts[row, e] > 0} == favourite
        assert all(int(counts.counts[row, e]) == 9 for e in favourite)
    before = counts.counts.clone()
    _route(routers[0], 9, seed=12)  # unbiased again: the dummy-like logits spread the tokens
    assert len({e for e in range(E) if counts.counts[0, e] > before[0, e]}) > K


def test_a_zipf_bias_samples_each_tokens_experts_as_the_tuner_does(routers: list[object]) -> None:
    """Through vLLM's own router: a dummy router's near-zero logits plus the bias route like the tuner's Zipf
    routing (k draws without replacement, probability p_e), not every token to the k most popular experts."""
    from moe_opt.bench.routing_dist import sample_routing

    counts, layers = _bound(routers[:1], ["model.layers.0.mlp.experts"], max_tokens=4096)
    biases = LayerBiases()
    biases.bind(routers[0], RouterBias("zipf", 1.0).logits(E, layer=0), "cpu")
    activate_biases(biases)
    torch.manual_seed(5)
    try:
        for _ in range(5):
            routers[0].select_experts(torch.randn(4096, 16), 1e-3 * torch.randn(4096, E))  # type: ignore[attr-defined]
    finally:
        activate_biases(None)
    row = counts.counts[0, :E]  # (the last column is the padding rows')
    seen = row.double() / row.sum()
    _, ids = sample_routing("zipf:1.0", 5 * 4096, E, K, seed=6, device="cpu")
    tuner = torch.bincount(ids.flatten().long(), minlength=E).double() / ids.numel()
    assert int((row > 0).sum()) == E  # every expert is drawn, not only the k most popular
    assert torch.all(seen[:-1] >= seen[1:])  # still ranked by popularity: expert 0 the hottest
    assert torch.allclose(seen, tuner, atol=0.01), (seen, tuner)  # shares within 1 point of the tuner's
    bf16 = biases.apply(routers[0], torch.zeros(3, E, dtype=torch.bfloat16))
    assert bf16.dtype == torch.bfloat16 and biases.apply(object(), bf16) is bf16  # unbound router: untouched


def test_a_uniform_bias_spreads_a_tied_router_as_the_tuners_uniform_routing(routers: list[object]) -> None:
    """A dummy-weight model's router ties (measured on the H200: every token to experts 0-7 of 128). Through vLLM's
    own router, tied logits alone send every token to the same k experts; with ``uniform`` every expert is drawn
    about equally."""
    from moe_opt.bench.routing_dist import sample_routing

    counts, layers = _bound(routers[:1], ["model.layers.0.mlp.experts"], max_tokens=4096)
    tied = torch.zeros(4096, E)
    routers[0].select_experts(torch.randn(4096, 16), tied)  # type: ignore[attr-defined]
    used = [e for e in range(E) if counts.counts[0, e] > 0]  # the collapse, reproduced: k experts take every token
    assert len(used) == K and all(int(counts.counts[0, e]) == 4096 for e in used)  # (which k: top-k's tie-break)
    before = counts.counts[0, :E].clone()
    biases = LayerBiases()
    biases.bind(routers[0], parse_router_bias("uniform").logits(E, layer=0), "cpu")  # type: ignore[union-attr]
    activate_biases(biases)
    torch.manual_seed(5)
    try:
        for _ in range(5):
            routers[0].select_experts(torch.randn(4096, 16), tied)  # type: ignore[attr-defined]
    finally:
        activate_biases(None)
    row = counts.counts[0, :E] - before
    seen = row.double() / row.sum()
    _, ids = sample_routing("uniform", 5 * 4096, E, K, seed=6, device="cpu")
    tuner = torch.bincount(ids.flatten().long(), minlength=E).double() / ids.numel()
    assert int((row > 0).sum()) == E
    assert torch.allclose(seen, tuner, atol=0.01), (seen, tuner)


def test_ids_of_another_integer_type_are_counted_too() -> None:
    layer = MoeLayer(0, "model.layers.0.mlp.experts", E, K, guarded=False)
    counts = DeviceCounts([layer], "cpu", 8)
    Slot(counts, 0, layer).add(torch.tensor([[1, 2], [2, 7]], dtype=torch.int16))
    assert counts.counts[0].tolist() == [0, 1, 2, 0, 0, 0, 0, 1, 0]
