"""moeperf's vLLM general plugin (entry point ``vllm.general_plugins: moeperf``).

vLLM calls ``register()`` in every process of every engine on a machine where moeperf is installed;
it does nothing unless ``MOEPERF_ARM_FLAGS`` is set (the EngineActor sets it). Otherwise it patches
vLLM's worker wrapper so that each worker rank applies the arm's flags and exports per-rank metrics
(see docs/metrics.md). Errors propagate on purpose: vLLM then stops the engine with our message.
"""

from __future__ import annotations


def register() -> None:
    from moe_opt.plugin.settings import load_settings

    settings = load_settings()
    if settings is None:
        return
    from moe_opt.plugin.hooks import install

    install(settings)
