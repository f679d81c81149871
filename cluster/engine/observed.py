"""What an engine actually ran, read back from its workers, and whether that is what the arm asked for.

The arm's flags reach vLLM through an environment variable and a plugin; nothing in the request proves the
plugin loaded in every worker, decoded the same flags and applied them. An arm whose plugin did not load would
be measured as if its optimizations were on. Every worker's plugin reports itself on the engine's /metrics
(``moeperf_plugin_info``, see docs/metrics.md): this module turns that text into a typed ``ObservedEngine``
and ``flag_mismatch`` names any difference from the request, so the arm runner can refuse to measure it.
Free of Ray and vLLM: the parsing and the verdict are tested on plain text.
"""

from __future__ import annotations

import posixpath
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import get_args

from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from cluster.engine.command import Device
from moe_opt.flags import SWITCHES, FlagStatus, OptimizationFlags
from moe_opt.plugin.metrics import (
    EXPERT_TOKENS,
    FUSED_MOE_LAUNCHES,
    MOE_BACKEND_LAYERS,
    MOE_CONFIG_LOOKUPS,
    PLUGIN_INFO,
)
from result_format.run_result import (
    ExpertLoad,
    MoeConfigSource,
    MoeLayerBackend,
    ObservedEngine,
    ObservedRank,
    SwapAbLaunches,
    parse_series_key,
)

STATUSES: tuple[str, ...] = get_args(FlagStatus)
NONE = "none"

Labels = Mapping[str, str]


def _samples(metrics_text: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, dict(s.labels), float(s.value))
        for fam in text_string_to_metric_families(metrics_text)
        for s in fam.samples
        if fam.name.startswith("moeperf_")
    ]


def _decoded_flags(raw: str | None) -> OptimizationFlags | None:
    if not raw:
        return None
    try:
        return OptimizationFlags.model_validate_json(raw)
    except (ValidationError, ValueError):
        return None


def _launches(series: Iterable[tuple[Labels, float]]) -> list[SwapAbLaunches]:
    total: dict[tuple[bool, int], float] = defaultdict(float)
    for labels, value in series:
        total[(labels.get("swap_ab") == "true", int(labels.get("bucket", "0")))] += value
    return [SwapAbLaunches(swap_ab=s, bucket=b, launches=int(n)) for (s, b), n in sorted(total.items()) if n]


def _config_sources(series: Iterable[tuple[Labels, float]]) -> list[MoeConfigSource]:
    total: dict[tuple[str, str], float] = defaultdict(float)
    for labels, value in series:
        total[(labels.get("config_file", ""), labels.get("source", ""))] += value
    return [MoeConfigSource(config_file=f, source=s, lookups=int(n)) for (f, s), n in sorted(total.items()) if n]


def _rank(info: Labels, per_rank: Mapping[str, list[tuple[Labels, float]]]) -> ObservedRank:
    rank = info.get("rank", "-1")

    def of(name: str) -> list[tuple[Labels, float]]:
        return [(lab, v) for lab, v in per_rank.get(name, []) if lab.get("rank") == rank]

    reason = info.get("not_applied_reason", NONE)
    return ObservedRank(
        rank=int(rank),
        world_size=int(info.get("world_size", "1")),
        platform=info.get("platform", "unknown"),
        gpu=info.get("gpu", NONE),
        gpu_uuid=info.get("gpu_uuid", NONE),
        vllm_version=info.get("vllm_version", "unknown"),
        triton_version=info.get("triton_version", "unknown"),
        flags=_decoded_flags(info.get("flags")),
        flag_status={s: info[f"{s}_status"] for s in SWITCHES if info.get(f"{s}_status") in STATUSES},
        flags_applied=info.get("flags_applied") == "true",
        engine_moe_backend=info.get("engine_moe_backend", "unknown"),
        not_applied_reason=None if reason == NONE else reason,
        moe_layer_backends=[
            MoeLayerBackend(backend=lab.get("backend", ""), experts=lab.get("experts", ""), layers=int(v))
            for lab, v in sorted(of(MOE_BACKEND_LAYERS), key=lambda x: sorted(x[0].items()))
            if v
        ],
        fused_moe_launches=_launches(of(FUSED_MOE_LAUNCHES)),
        config_sources=_config_sources(of(MOE_CONFIG_LOOKUPS)),
    )


def observe_engine(
    metrics_text: str, moe_backends_logged: list[str] | None = None, metrics_error: str | None = None
) -> ObservedEngine:
    """The engine's /metrics text as one ObservedRank per plugin_info series (one per worker rank)."""
    per_name: dict[str, list[tuple[Labels, float]]] = defaultdict(list)
    infos: list[dict[str, str]] = []
    for name, labels, value in _samples(metrics_text):
        if name == PLUGIN_INFO:
            if value:
                infos.append(labels)
        else:
            per_name[name].append((labels, value))
    ranks = sorted((_rank(i, per_name) for i in infos), key=lambda r: r.rank)
    reasons = list(dict.fromkeys(r.not_applied_reason or "" for r in ranks if not r.flags_applied))
    nothing = (
        "nothing applied: " + "; ".join(x for x in reasons if x) if ranks and not any(r.flags_applied for r in ranks)
        else None
    )  # fmt: skip
    return ObservedEngine(
        ranks=ranks,
        moe_backends_logged=list(moe_backends_logged or []),
        nothing_applied=nothing,
        metrics_error=metrics_error,
    )


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def _backend_mismatch(requested: OptimizationFlags, observed: ObservedEngine) -> str | None:
    """A forced --moe-backend that no MoE layer (or, without layer reports, no start-up log line) names."""
    if not requested.asks_for("moe_backend"):
        return None
    chosen = [b.backend for r in observed.ranks for b in r.moe_layer_backends] or observed.moe_backends_logged
    if not chosen or any(_norm(requested.moe_backend) in _norm(c) for c in chosen):
        return None
    return f"moe_backend={requested.moe_backend} was requested but vLLM chose {sorted(set(chosen))}"


def _expected_status(requested: OptimizationFlags, switch: str, device: Device) -> FlagStatus:
    if not requested.asks_for(switch):
        return "vllm_default"
    return "applied" if device == "cuda" else "not_applicable_cpu"


def _rank_problems(requested: OptimizationFlags, r: ObservedRank, device: Device) -> list[str]:
    out = []
    if device == "cuda" and r.platform != "cuda":
        out.append(f"rank {r.rank} ran on {r.platform}, not cuda")
    if r.flags is None:
        out.append(f"rank {r.rank}: the flags it decoded cannot be read")
    else:
        for field in OptimizationFlags.model_fields:
            if getattr(r.flags, field) != getattr(requested, field):
                out.append(
                    f"rank {r.rank} ran {field}={r.flags.value_text(field)}, the arm requested "
                    f"{field}={requested.value_text(field)}"
                )
    for switch in SWITCHES:
        want, got = _expected_status(requested, switch, device), r.flag_status.get(switch)
        if got == want:
            continue
        if want == "applied":
            out.append(
                f"rank {r.rank}: {switch}={requested.value_text(switch)} was requested but is "
                f"{got or 'not reported'} there, not applied"
            )
        else:
            out.append(f"rank {r.rank}: {switch} is {got or 'not reported'}, expected {want} on {device}")
    return out


def _tuned_config_mismatch(requested: OptimizationFlags, observed: ObservedEngine) -> str | None:
    """An arm with ``tuned_config_dir`` whose engine took any Triton MoE config from elsewhere, or none at all.

    vLLM falls back silently (its shipped ``configs/`` file or its default heuristic) when the folder lacks the
    file name it looks for, e.g. tuned on another GPU, TP size or dtype: the arm would measure vLLM's tiles
    while claiming tuned ones. No lookup at all means the Triton MoE path never ran (another backend was chosen).
    """
    folder = requested.tuned_config_dir
    if folder is None:
        return None
    want = posixpath.normpath(folder)
    sources = [(r.rank, s) for r in observed.ranks for s in r.config_sources]
    if not sources:
        return (
            f"tuned_config_dir={folder} was requested but no Triton MoE config lookup was observed: vLLM ran "
            "another MoE path, which never reads it (set moe_backend: triton)"
        )
    elsewhere = sorted(
        {(s.config_file, s.source) for _, s in sources if posixpath.normpath(posixpath.dirname(s.source)) != want}
    )
    if not elsewhere:
        return None
    loaded = "; ".join(f"{name} from {src}" for name, src in elsewhere)
    return f"tuned_config_dir={folder} was requested but vLLM loaded {loaded}, not from that folder"


def flag_mismatch(requested: OptimizationFlags, observed: ObservedEngine | None, device: Device) -> str | None:
    """Why the engine did not run what the arm asked for, naming each difference; None when it did.

    ``device`` is where the engine computes (the arm runner's engine device: "cpu" for a CPU engine standing in
    for simulated GPUs). On CUDA every switch the arm sets must be ``applied`` on every rank; on CPU the switches
    must read ``not_applicable_cpu`` (set) or ``vllm_default`` (unset), so nothing claims an effect there.
    ``tuned_config_dir`` has no switch status (vLLM itself reads the folder): on CUDA the per-shape config sources
    the workers observed must all be files in it.
    """
    if observed is None or not observed.ranks:
        why = f" ({observed.metrics_error})" if observed is not None and observed.metrics_error else ""
        return (
            f"the moeperf plugin did not report from the engine's workers{why}; requested "
            f"{requested.describe()} cannot be verified"
        )
    problems: list[str] = []
    world = max(r.world_size for r in observed.ranks)
    seen = [r.rank for r in observed.ranks]
    missing = sorted(set(range(world)) - set(seen))
    if missing:
        problems.append(f"rank(s) {missing} of {world} did not report (the plugin did not run there)")
    twice = sorted({x for x in seen if seen.count(x) > 1})
    if twice:
        problems.append(f"rank(s) {twice} reported more than one plugin_info series")
    for r in observed.ranks:
        problems += _rank_problems(requested, r, device)
    if device == "cuda" and (backend := _backend_mismatch(requested, observed)):
        problems.append(backend)
    if device == "cuda" and (tuned := _tuned_config_mismatch(requested, observed)):
        problems.append(tuned)
    return "; ".join(dict.fromkeys(problems)) or None


def flags_applied(requested: OptimizationFlags, observed: ObservedEngine | None, device: Device) -> bool:
    """What ``ArmResult.flags_applied`` should say: on CUDA and observed to run exactly the request."""
    return device == "cuda" and flag_mismatch(requested, observed, device) is None


def launches_in_window(window_metrics: Mapping[str, float]) -> list[SwapAbLaunches]:
    """fused_moe_kernel launches by SWAP_AB and bucket from ``ArmResult.window_metrics`` (all ranks summed)."""
    return _launches(_series(window_metrics, FUSED_MOE_LAUNCHES))


def config_sources_in_window(window_metrics: Mapping[str, float]) -> list[MoeConfigSource]:
    return _config_sources(_series(window_metrics, MOE_CONFIG_LOOKUPS))


def without_expert_series(window_metrics: Mapping[str, float]) -> dict[str, float]:
    """The window less ``moeperf_expert_tokens_total``, which the result keeps as ``expert_load`` instead: one series
    per expert, layer and rank would otherwise be most of a result (DeepSeek-V3 at TP=8: 58 x 256 x 8, some
    119,000 keys per arm), and the ranks repeat one another's counts."""
    return {k: v for k, v in window_metrics.items() if parse_series_key(k)[0] != EXPERT_TOKENS}


def expert_load_in_window(window_metrics: Mapping[str, float], known_series: Iterable[str] = ()) -> list[ExpertLoad]:
    """Tokens per expert per MoE layer from the window's growth of ``moeperf_expert_tokens_total``.

    Each layer is read from the lowest rank that exports it (with TP every rank routes the same tokens identically;
    with PP a layer lives on one stage). The window keeps only series that grew, so an expert that got no token is
    absent from it: ``known_series`` (the keys of a scrape, which hold every expert's series from the engine's
    start) gives each layer its full width, zeros included.
    """
    owner: dict[int, int] = {}
    width: dict[tuple[int, int], int] = defaultdict(int)
    grown: dict[tuple[int, int], dict[int, float]] = defaultdict(dict)
    for key, value in [*((k, 0.0) for k in known_series), *window_metrics.items()]:
        name, labels = parse_series_key(key)
        if name != EXPERT_TOKENS:
            continue
        try:
            rank, layer, expert = int(labels["rank"]), int(labels["layer"]), int(labels["expert"])
        except (KeyError, ValueError):
            continue
        owner[layer] = min(owner.get(layer, rank), rank)
        width[(layer, rank)] = max(width[(layer, rank)], expert + 1)
        if value:
            tokens = grown[(layer, rank)]
            tokens[expert] = tokens.get(expert, 0.0) + value
    out = []
    for layer in sorted(owner):
        rank = owner[layer]
        tokens = grown.get((layer, rank), {})
        out.append(ExpertLoad(layer=layer, tokens=[round(tokens.get(e, 0.0)) for e in range(width[(layer, rank)])]))
    return out


def _series(window_metrics: Mapping[str, float], name: str) -> list[tuple[Labels, float]]:
    out: list[tuple[Labels, float]] = []
    for key, value in window_metrics.items():
        n, labels = parse_series_key(key)
        if n == name:
            out.append((labels, value))
    return out
