"""Where the plugin attaches to vLLM: the per-process worker wrapper and the collective group class.

``WorkerWrapperBase`` is what both the in-process (TP=1) and the multiprocessing executor call for
every step, whatever the platform's worker class is (CPUWorker, GPU Worker), so wrapping it once
covers every rank. Patching happens on the class at plugin load; per-rank state is created in
``init_device``, the first point where the rank and its device are known and before the model is
loaded (so flags are applied before any kernel runs and warm-up compilations are counted); the
kernel-choice counters (``kernel_choices``) are installed there too, after the flags' patches.
``initialize_from_config`` is the first call after the model is loaded: each MoE layer's backend is read there,
and the MoE layers' routers are bound to the expert-load counts (and the router bias, if any) before warm-up and
CUDA-graph capture (``expert_load.py``).
The Ray executor's compiled-graph path (``execute_model_ray``) bypasses the wrapper: not covered.
"""

from __future__ import annotations

import atexit
import logging
import os
from typing import Any

from moe_opt.flags import FlagStatus, OptimizationFlags
from moe_opt.plugin.buffered import Buffer
from moe_opt.plugin.credentials import forget_api_key
from moe_opt.plugin.expert_harvest import Harvester, counter_publish
from moe_opt.plugin.expert_load import (
    DeviceCounts,
    activate,
    activate_biases,
    find_moe_layers,
    install_router_hook,
    install_runner_join,
)
from moe_opt.plugin.gpu import NvmlSampler, identify
from moe_opt.plugin.host import HostSampler
from moe_opt.plugin.kernel_choices import install_config_sources, install_launch_counter, moe_layer_backends
from moe_opt.plugin.metrics import EXPERT_TOKENS, EXPERT_TOKENS_UNPUBLISHED, PLUGIN_INFO, Metrics
from moe_opt.plugin.patches import PatchTargetMissing, apply_flags, installed_vllm_version, not_applied_reason
from moe_opt.plugin.rank import RankInstruments
from moe_opt.plugin.router_bias import LayerBiases
from moe_opt.plugin.settings import PluginSettings
from moe_opt.plugin.sync import CollectiveClock, SyncRing, ring_path, time_collectives

logger = logging.getLogger(__name__)

WRAPPER = "vllm.v1.worker.worker_base:WorkerWrapperBase"
GROUP = "vllm.distributed.parallel_state:GroupCoordinator"


class _State:
    settings: PluginSettings | None = None
    instruments: RankInstruments | None = None
    expert_load: Harvester | None = None
    metrics = Metrics()  # one per process: prometheus_client allows one object per name and registry
    clock = CollectiveClock()
    keep: list[Any] = []  # objects that must live as long as the process (compile counter, sampler)


STATE = _State()


def _flags_labels(flags: OptimizationFlags) -> dict[str, str]:
    return {
        "swap_ab": "vllm_default" if flags.swap_ab is None else str(flags.swap_ab).lower(),
        "moe_backend": flags.moe_backend,
        "no_respecialize": str(flags.no_respecialize).lower(),
    }


def triton_version() -> str:
    """The Triton vLLM runs its kernels with, or "none": vLLM's CPU build disables an installed Triton."""
    try:
        from vllm.triton_utils import HAS_TRITON
    except ImportError:
        HAS_TRITON = False
    if not HAS_TRITON:
        return "none"
    try:
        import triton

        return str(triton.__version__)
    except ImportError:
        return "none"


def info_labels(
    rank_labels: dict[str, str],
    settings: PluginSettings,
    status: dict[str, FlagStatus],
    *,
    vllm_version: str,
    platform: str,
    world_size: int,
    engine_moe_backend: Any,
) -> dict[str, str]:
    """The labels of this rank's ``moeperf_plugin_info``: what it was asked, decoded, applied and runs with."""
    applies = platform == "cuda" or settings.force_patches
    return {
        **rank_labels,
        "run_id": settings.run_id,
        "vllm_version": vllm_version,
        "platform": platform,
        **_flags_labels(settings.flags),
        **{f"{k}_status": v for k, v in status.items()},
        "flags_applied": str(any(v == "applied" for v in status.values())).lower(),
        "world_size": str(world_size),
        "triton_version": triton_version(),
        "engine_moe_backend": str(engine_moe_backend or "unknown"),
        "not_applied_reason": not_applied_reason(status, applies) or "none",
        "flags": settings.flags.model_dump_json(),  # exactly what this worker decoded, for the harness to compare
    }


def _served_name(vllm_config: Any) -> str:
    name = getattr(getattr(vllm_config, "model_config", None), "served_model_name", None)
    if isinstance(name, list | tuple):
        name = name[0] if name else None
    return str(name) if name else "unknown"


def _start_exporter(settings: PluginSettings, rank: int) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return  # served by vLLM's own /metrics (MultiProcessCollector over that directory)
    if settings.metrics_port is not None:
        import prometheus_client

        prometheus_client.start_http_server(settings.metrics_port + rank)
        logger.info("moeperf: per-rank metrics on port %d", settings.metrics_port + rank)
        return
    logger.warning(
        "moeperf: neither PROMETHEUS_MULTIPROC_DIR nor MOEPERF_METRICS_PORT is set: per-rank metrics are "
        "recorded but cannot be scraped"
    )


def setup_rank(wrapper: Any) -> RankInstruments:
    """Apply the arm's flags and create this rank's instruments (called once per worker process)."""
    settings = STATE.settings
    assert settings is not None
    if forget_api_key():  # before the model is compiled: the key must not enter vLLM's compile cache key
        logger.info("moeperf: the server's API key removed from this worker's environment")
    worker = wrapper.worker
    vllm_config = wrapper.vllm_config
    rank = int(getattr(worker, "rank", getattr(wrapper, "global_rank", 0)))
    parallel = vllm_config.parallel_config
    world = int(getattr(parallel, "tensor_parallel_size", 1)) * int(getattr(parallel, "pipeline_parallel_size", 1))
    device = getattr(worker, "device", None)
    gpu = identify(device)
    on_gpu = gpu.index != "none"
    version = installed_vllm_version()
    kernel_config = getattr(vllm_config, "kernel_config", None)
    status = apply_flags(
        settings.flags,
        on_gpu=on_gpu or settings.force_patches,
        vllm_version=version,
        engine_moe_backend=getattr(kernel_config, "moe_backend", None),
        extra_no_respecialize=settings.extra_no_respecialize,
        missing_target=settings.missing_target,
    )
    labels = {
        "engine": settings.engine or _served_name(vllm_config),
        "arm": settings.arm,
        "node": settings.node,
        "rank": str(rank),
        "gpu": gpu.index,
        "gpu_uuid": gpu.uuid,
    }
    metrics = STATE.metrics
    ring = None
    if world > 1:
        init_method = getattr(worker, "distributed_init_method", "")
        key = f"{init_method}|{os.getppid()}|{getattr(parallel, 'data_parallel_rank', 0)}"
        ring = SyncRing(ring_path(key, world), world, rank)
        atexit.register(ring.close, unlink=rank == 0)
    buffer = Buffer()
    inst = RankInstruments(
        labels, rank, world, metrics, STATE.clock, ring, settings.rank_delay, buffer, gpu_steps=on_gpu
    )
    buffer.start()
    atexit.register(buffer.stop)
    # After the flags' patches: the Swap-AB decision counted is the one the arm's patch makes, if any.
    install_launch_counter(inst.on_launch, version)
    install_config_sources(inst.on_config_lookup, version)
    if settings.expert_load or settings.router_bias is not None:
        install_router_hook(version)  # checked here, at start; the layers are bound once the model is loaded
    if settings.expert_load and settings.expert_load_overlap:
        install_runner_join(version)
    info = info_labels(
        labels,
        settings,
        status,
        vllm_version=version,
        platform="cuda" if on_gpu else str(getattr(device, "type", "cpu")),
        world_size=world,
        engine_moe_backend=getattr(kernel_config, "moe_backend", None),
    )
    metrics.get(PLUGIN_INFO).labels(**info).set(1)
    _start_exporter(settings, rank)
    try:
        from moe_opt.kernels.compile_counter import CompileCounter

        STATE.keep.append(CompileCounter(on_event=inst.on_compile, keep_events=False).install())
    except Exception as e:  # noqa: BLE001 - no Triton: nothing to count
        logger.info("moeperf: Triton compile counting off (%s)", e)
    sampler = NvmlSampler(gpu, inst.set_gauge, settings.gpu_poll_s)
    if sampler.start():
        STATE.keep.append(sampler)
    host = HostSampler(inst.inc_counter, settings.gpu_poll_s)
    if host.start():
        STATE.keep.append(host)
    logger.info("moeperf: rank %d instrumented (%s), flags %s", rank, labels, status)
    return inst


def record_moe_backends(wrapper: Any) -> None:
    """After the model is loaded: which backend and experts class each MoE layer got (an observation only)."""
    inst = STATE.instruments
    if inst is None:
        return
    try:
        layers = moe_layer_backends(wrapper.worker.get_model())
    except Exception as e:  # noqa: BLE001 - a model runner without get_model: the start-up log still says it
        logger.info("moeperf: MoE layer backends not read (%s)", e)
        return
    inst.set_moe_backends(dict(layers))
    logger.info("moeperf: MoE layer backends %s", dict(layers))


def _device_of(model: Any, wrapper: Any) -> Any:
    """Where the model's layers live (their parameters'), else the worker's device."""
    param = next(iter(model.parameters()), None)
    return param.device if param is not None else getattr(wrapper.worker, "device", "cpu")


def start_router_bias(wrapper: Any) -> None:
    """After the model is loaded and before warm-up: bias every MoE layer's router logits (MOEPERF_ROUTER_BIAS)."""
    settings = STATE.settings
    if settings is None or settings.router_bias is None:
        return
    model = wrapper.worker.get_model()  # a worker that cannot show its model must not run unbiased: let it raise
    layers = find_moe_layers(model)
    device = _device_of(model, wrapper)
    biases = LayerBiases()
    for layer, router in layers:
        biases.bind(router, settings.router_bias.logits(layer.num_experts, layer.number), device)
    activate_biases(biases)
    logger.info("moeperf: router logits of %d MoE layer(s) biased by %s", len(layers), settings.router_bias)


def start_expert_load(wrapper: Any) -> Harvester | None:
    """After the model is loaded and before warm-up and CUDA-graph capture: count tokens per expert per MoE layer.

    Bound before capture, so the captured graphs hold the count. One counter child per (layer, expert) is created
    here, at 0, so every expert's series exists before serving (a window's growth then names every expert).
    """
    inst, settings = STATE.instruments, STATE.settings
    if inst is None or settings is None or not settings.expert_load:
        return None
    try:
        model = wrapper.worker.get_model()
    except Exception as e:  # noqa: BLE001 - a model runner without get_model: nothing to bind to
        logger.warning("moeperf: tokens per expert not counted: model not readable (%s)", e)
        return None
    layers = find_moe_layers(model)
    if not layers:
        logger.info("moeperf: no MoE layer with a router found: tokens per expert not counted")
        return None
    device = _device_of(model, wrapper)
    sched = getattr(wrapper.vllm_config, "scheduler_config", None)
    max_tokens = int(getattr(sched, "max_num_batched_tokens", 0) or 0)
    counts = DeviceCounts([layer for layer, _ in layers], device, max_tokens, overlap=settings.expert_load_overlap)
    counts.bind(router for _, router in layers)
    metric = STATE.metrics.get(EXPERT_TOKENS)
    lv = tuple(inst.labels.values())
    publish = counter_publish(metric, lv, [layer for layer, _ in layers])
    flag = STATE.metrics.get(EXPERT_TOKENS_UNPUBLISHED).labels(*lv)
    flag.set(0)
    harvester = Harvester(counts, publish, unpublished=lambda pending: flag.set(1 if pending else 0))
    activate(counts)
    harvester.start()
    atexit.register(harvester.stop)
    logger.info(
        "moeperf: counting tokens per expert in %d MoE layer(s) (%s) on %s",
        len(layers), [layer.number for layer, _ in layers], device,
    )  # fmt: skip
    return harvester


def _resolve(qualname: str) -> Any:
    import importlib

    mod, _, attr = qualname.partition(":")
    try:
        obj = getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError) as e:
        raise PatchTargetMissing("instruments", qualname, installed_vllm_version(), f"cannot resolve ({e})") from e
    return obj


def install(settings: PluginSettings) -> None:
    """Patch vLLM's classes in this process; idempotent. Raises PatchTargetMissing if vLLM moved them."""
    if STATE.settings is not None:
        return
    STATE.settings = settings
    cls = _resolve(WRAPPER)
    for name in ("init_device", "execute_model", "initialize_from_config"):
        if not callable(cls.__dict__.get(name)):
            raise PatchTargetMissing("instruments", f"{WRAPPER}.{name}", installed_vllm_version(), "method missing")
    orig_init_device = cls.__dict__["init_device"]
    orig_execute = cls.__dict__["execute_model"]
    orig_initialize = cls.__dict__["initialize_from_config"]

    def initialize_from_config(self: Any, *args: Any, **kwargs: Any) -> Any:
        # vLLM's engine core calls it once per worker after load_model and before warm-up: the model is there.
        out = orig_initialize(self, *args, **kwargs)
        record_moe_backends(self)
        start_router_bias(self)
        STATE.expert_load = start_expert_load(self)
        return out

    def init_device(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig_init_device(self, *args, **kwargs)
        time_collectives(_resolve(GROUP), STATE.clock)
        STATE.instruments = setup_rank(self)
        return out

    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        inst = STATE.instruments
        if inst is None:
            return orig_execute(self, scheduler_output, *args, **kwargs)
        inst.begin(scheduler_output)
        load = STATE.expert_load
        if load is not None:
            load.begin(getattr(scheduler_output, "total_num_scheduled_tokens", None))
        try:
            out = orig_execute(self, scheduler_output, *args, **kwargs)
        finally:
            if load is not None:
                load.end()
        if out is not None:  # None: sampling follows in sample_tokens, which ends the step
            inst.end()
        return out

    def sample_tokens(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = self.worker.sample_tokens(*args, **kwargs)
        inst = STATE.instruments
        if inst is not None:
            inst.end()
        return out

    cls.init_device = init_device
    cls.execute_model = execute_model
    cls.initialize_from_config = initialize_from_config
    if "sample_tokens" not in cls.__dict__:
        cls.sample_tokens = sample_tokens
