"""The optimization set of one arm, and how it reaches a vLLM engine.

One frozen object per arm is the single source of truth: the engine's CLI arguments, its
environment and the result file are all derived from it, so a result can never claim flags the
engine did not run with. Combinations that cannot mean anything raise instead of being quietly
ignored, because a silently ignored flag turns an A/B test into an A/A test.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Literal

from pydantic import Field, field_validator, model_validator

from common.strict import FrozenStrictModel

FLAGS_ENV_VAR = "MOEPERF_ARM_FLAGS"
"""Environment variable carrying the arm's flags (JSON) to the worker plugin in every vLLM process."""
TUNED_CONFIG_ENV_VAR = "VLLM_TUNED_CONFIG_FOLDER"
"""vLLM's own variable: the folder ``get_moe_configs`` searches first for a tuned Triton MoE config file."""

MoeBackend = Literal["auto", "triton", "flashinfer_cutlass", "cutlass", "deep_gemm", "marlin"]
TRITON_KERNEL_SWITCHES = ("swap_ab", "no_respecialize")
SWITCHES = ("swap_ab", "moe_backend", "no_respecialize")
"""The flags that each get a status in the engine (``no_respecialize_kernels`` only extends ``no_respecialize``)."""

FlagStatus = Literal["applied", "vllm_default", "not_applicable_cpu"]
"""What a worker did with one switch: ``applied`` (patched, or verified in the engine config), ``vllm_default``
(the arm asks for nothing), ``not_applicable_cpu`` (vLLM's CPU build never runs what the switch acts on)."""


class UnsupportedFlagCombination(ValueError):
    """The flags ask for something the selected backend or platform cannot do."""


class OptimizationFlags(FrozenStrictModel):
    """What an arm switches on; ``None`` means "leave vLLM's own default alone".

    Also what the worker plugin decodes from ``MOEPERF_ARM_FLAGS`` inside every vLLM process, so a
    flag's default and its meaning live here only.
    """

    swap_ab: bool | None = Field(
        None,
        description=(
            "Swap-AB in vLLM's Triton fused_moe_kernel (FP8 w8a8, SM90, BLOCK_M < 64). True forces it on, "
            "False forces it off, null keeps vLLM's heuristic (enable_swap_ab)."
        ),
    )
    moe_backend: MoeBackend = Field(
        "auto",
        description=(
            "vLLM --moe-backend. 'triton' routes FP8 MoE to the Triton fused_moe_kernel instead of the "
            "Hopper default for FP8 checkpoints with static activation scales (FlashInfer CUTLASS; vLLM 0.26 "
            "refuses it for online --quantization fp8); 'auto' lets vLLM choose."
        ),
    )
    no_respecialize: bool = Field(
        False,
        description=(
            "Mark the batch-dependent size arguments of vLLM's Triton fused_moe_kernel do_not_specialize, so "
            "a new batch size never triggers a Triton JIT compile while serving."
        ),
    )

    tuned_config_dir: str | None = Field(
        None,
        description=(
            "Absolute path of a folder of tuned Triton MoE config files (vLLM's 'E=...,N=...,device_name=...json', "
            "e.g. written by `moeperf tune`); the engine starts with VLLM_TUNED_CONFIG_FOLDER set to it, so vLLM's "
            "get_moe_configs loads those tiles before its own. Only the Triton MoE path reads them (moe_backend "
            "'auto' or 'triton'); the engine must be observed to load every Triton MoE config from this folder. "
            "null: vLLM's shipped configs or its default heuristic."
        ),
    )

    no_respecialize_kernels: dict[str, list[str]] = Field(
        default_factory=dict,
        description=(
            "More Triton kernels, 'module:kernel' -> batch-dependent int argument names, that no_respecialize "
            "marks do_not_specialize (each checked at engine start)."
        ),
    )

    @field_validator("tuned_config_dir")
    @classmethod
    def _absolute(cls, v: str | None) -> str | None:
        """The engine's working directory is not the experiment file's (a Ray job's is a temporary copy): a
        relative folder would name a different place in each, so only an absolute one has one meaning."""
        if v is not None and not posixpath.isabs(v):
            raise ValueError(f"tuned_config_dir must be an absolute path, got {v!r}")
        return v

    @model_validator(mode="after")
    def _reject_meaningless(self) -> OptimizationFlags:
        if self.tuned_config_dir is not None and self.moe_backend not in ("auto", "triton"):
            raise UnsupportedFlagCombination(
                f"tuned_config_dir holds Triton fused_moe_kernel configs, but moe_backend={self.moe_backend!r} "
                "does not run that kernel; use moe_backend 'triton' or 'auto'"
            )
        if self.no_respecialize_kernels and not self.no_respecialize:
            raise UnsupportedFlagCombination("no_respecialize_kernels needs no_respecialize: true")
        triton_only = [s for s in TRITON_KERNEL_SWITCHES if getattr(self, s) not in (None, False)]
        if triton_only and self.moe_backend not in ("auto", "triton"):
            raise UnsupportedFlagCombination(
                f"{', '.join(triton_only)} act on vLLM's Triton fused_moe_kernel, but moe_backend="
                f"{self.moe_backend!r} does not run that kernel; use moe_backend 'triton' or 'auto'"
            )
        return self

    def is_baseline(self) -> bool:
        return self == OptimizationFlags()

    def vllm_args(self) -> list[str]:
        """CLI arguments for ``vllm.entrypoints.openai.api_server``."""
        return [] if self.moe_backend == "auto" else ["--moe-backend", self.moe_backend]

    def asks_for(self, switch: str) -> bool:
        """Whether the arm changes ``switch`` (one of SWITCHES) from vLLM's default: what the engine must apply."""
        if switch == "swap_ab":
            return self.swap_ab is not None
        if switch == "moe_backend":
            return self.moe_backend != "auto"
        if switch == "no_respecialize":
            return self.no_respecialize
        raise KeyError(switch)

    def value_text(self, field: str) -> str:
        """One field as it reads in a message and in the plugin's labels: ``vllm-default``, ``true``, ``triton``."""
        v = getattr(self, field)
        if v is None:
            return "vllm-default"
        if isinstance(v, bool):
            return str(v).lower()
        return v if isinstance(v, str) else json.dumps(v, sort_keys=True)

    def needs_plugin(self) -> bool:
        """Swap-AB and re-specialisation have no vLLM flag: only the worker plugin can apply them."""
        return self.swap_ab is not None or self.no_respecialize

    def engine_env(self) -> dict[str, str]:
        """The engine's environment from these flags: the plugin's copy of them, and vLLM's tuned-config folder."""
        env = {FLAGS_ENV_VAR: self.model_dump_json()}
        if self.tuned_config_dir is not None:
            env[TUNED_CONFIG_ENV_VAR] = self.tuned_config_dir
        return env

    def describe(self) -> str:
        """One line; ``tuned_config_dir`` only when set, so the line of an arm without it reads as it always did."""
        fields = ["moe_backend", "swap_ab", "no_respecialize"]
        if self.tuned_config_dir is not None:
            fields.append("tuned_config_dir")
        return " ".join(f"{f}={self.value_text(f)}" for f in fields)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> OptimizationFlags | None:
        """None without the variable; raises ValueError (JSON or validation) on a value that is not flags."""
        raw = environ.get(FLAGS_ENV_VAR)
        return None if raw is None else cls.model_validate(json.loads(raw))


def cpu_effect_note(flags: OptimizationFlags) -> str | None:
    """Why an arm's flags cannot change anything on vLLM's CPU build, or None for the baseline.

    The CPU build runs MoE through its own CPU kernels: there is no Triton fused_moe_kernel to swap,
    no FP8 backend to route and no Triton JIT. Saying so beats showing a difference that is noise.
    """
    if flags.is_baseline():
        return None
    return (
        f"flags [{flags.describe()}] change nothing in the kernels on vLLM's CPU build "
        "(no Triton fused_moe_kernel, no FP8 MoE backends, no Triton JIT): any difference between arms "
        "here is noise"
    )
