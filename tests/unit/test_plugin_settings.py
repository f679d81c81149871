"""The plugin is inert without MOEPERF_ARM_FLAGS and reads its environment strictly otherwise."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from moe_opt.flags import FLAGS_ENV_VAR, OptimizationFlags
from moe_opt.plugin.settings import PluginConfigError, RankDelay, load_settings


def test_no_flags_no_settings() -> None:
    assert load_settings({}) is None


def test_register_without_flags_imports_nothing_from_vllm() -> None:
    code = (
        "import os, sys; os.environ.pop('MOEPERF_ARM_FLAGS', None)\n"
        "from moe_opt.plugin import register; register()\n"
        "bad = [m for m in sys.modules if m.startswith(('vllm', 'moe_opt.plugin.hooks', 'prometheus_client'))]\n"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_settings_from_an_engine_env() -> None:
    flags = OptimizationFlags(swap_ab=True, moe_backend="triton")
    s = load_settings(
        {
            **flags.engine_env(),
            "MOEPERF_ARM": "fast",
            "MOEPERF_RUN_ID": "r1",
            "MOEPERF_ENGINE": "fast-0",
            "MOEPERF_NODE": "n1",
            "MOEPERF_TEST_RANK_DELAY": "1:0.05",
            "MOEPERF_NO_RESPECIALIZE_KERNELS": json.dumps({"m:k": ["num_tokens"]}),
        }
    )
    assert s is not None
    assert s.flags == flags
    assert (s.arm, s.run_id, s.engine, s.node) == ("fast", "r1", "fast-0", "n1")
    assert s.rank_delay == RankDelay(1, 0.05)
    assert s.extra_no_respecialize == {"m:k": ["num_tokens"]}


def test_defaults_are_the_flags_models_own() -> None:
    s = load_settings({FLAGS_ENV_VAR: "{}"})
    assert s is not None and s.flags == OptimizationFlags() and s.flags.is_baseline()


def test_listed_kernels_come_from_the_flags_too() -> None:
    flags = {"swap_ab": None, "moe_backend": "auto", "no_respecialize": True, "no_respecialize_kernels": {"a:k": ["n"]}}
    s = load_settings({FLAGS_ENV_VAR: json.dumps(flags)})
    assert s is not None and s.extra_no_respecialize == {"a:k": ["n"]}


@pytest.mark.parametrize(
    "env",
    [
        {FLAGS_ENV_VAR: "{not json"},
        {FLAGS_ENV_VAR: "[]"},
        {FLAGS_ENV_VAR: "{}", "MOEPERF_TEST_RANK_DELAY": "1"},
        {FLAGS_ENV_VAR: '{"swap_ab": true, "swapab": true}'},  # a typo: the harness would refuse it too
        {FLAGS_ENV_VAR: '{"no_respecialize": true, "moe_backend": "marlin"}'},  # a meaningless combination
        {FLAGS_ENV_VAR: "{}", "MOEPERF_NO_RESPECIALIZE_KERNELS": "[]"},
    ],
)
def test_bad_env_is_an_error(env: dict[str, str]) -> None:
    with pytest.raises(PluginConfigError):
        load_settings(env)
