"""The embedded default model: a Mixtral-shaped MoE small enough for vLLM's CPU build.

The same generator writes real models' per-layer shapes with fewer layers (Mixtral-8x7B,
Qwen3-30B-A3B) for the GPU runs: with ``--load-format dummy`` only the shapes matter, so a
4-layer model with real MoE and attention widths exercises exactly the kernels a full one does.

vLLM needs a config and a tokenizer on disk even with ``--load-format dummy``; writing them
ourselves means the default run downloads nothing and works offline, on any node, every time.
The tokenizer maps every id to one printable ASCII character, so any sequence of ids the dummy
weights produce decodes cleanly (no half UTF-8 bytes held back by the detokenizer) and one
token id in the prompt is exactly one prompt token.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from common.strict import FrozenStrictModel

SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
FP8_BLOCK = 128
# config.json `quantization_config` of an FP8-serialised checkpoint, per `TinyMoeSpec.fp8_checkpoint`:
# vLLM then builds FP8 weights and scales (filled by --load-format dummy) instead of quantising bf16
# weights online, which decides which FP8 MoE backends it will route to.
FP8_CHECKPOINT_CONFIGS: dict[str, dict[str, object] | None] = {
    "none": None,
    "per_tensor_static": {"quant_method": "fp8", "activation_scheme": "static"},
    "block_128": {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [FP8_BLOCK, FP8_BLOCK]},
}
PRINTABLE_ASCII = [chr(c) for c in range(32, 127)]


class TinyMoeSpec(FrozenStrictModel):
    """Shape of the generated model; every field changes the cache key."""

    architecture: Literal["mixtral", "qwen3_moe"] = Field(
        "mixtral",
        description="Decoder family: 'mixtral' (MixtralForCausalLM) or 'qwen3_moe' (Qwen3MoeForCausalLM: QK-norm, "
        "normalised top-k, many small experts).",
    )
    num_hidden_layers: int = Field(
        2, ge=1, description="Decoder layers; any depth (Mixtral-8x7B 32, Qwen3-30B-A3B 48): weights are dummy."
    )
    hidden_size: int = Field(128, ge=16, description="Model width.")
    intermediate_size: int = Field(256, ge=16, description="Per-expert FFN width.")
    num_local_experts: int = Field(8, ge=2, description="Experts per MoE layer.")
    num_experts_per_tok: int = Field(2, ge=1, description="Top-k experts per token.")
    num_attention_heads: int = Field(4, ge=1, description="Attention heads.")
    num_key_value_heads: int = Field(2, ge=1, description="KV heads (GQA).")
    max_position_embeddings: int = Field(2048, ge=64, description="Longest context the config allows.")
    head_dim: int | None = Field(
        None,
        ge=8,
        description="Width of one attention head; null: hidden_size / num_attention_heads (Qwen3-30B-A3B "
        "has 128 with hidden_size 2048 and 32 heads).",
    )

    fp8_checkpoint: Literal["none", "per_tensor_static", "block_128"] = Field(
        "none",
        description="Write the model as an FP8 checkpoint (dummy weights still): 'per_tensor_static' has static "
        "per-tensor activation scales, the scheme vLLM 0.26 routes to FlashInfer CUTLASS on Hopper; 'block_128' "
        "has 128x128 weight blocks and dynamic activations, as DeepSeek-V3 and Qwen3 FP8 checkpoints ship. "
        "'none': bf16 weights, which model.quantization fp8 quantises online (dynamic activation scales, which "
        "FlashInfer CUTLASS refuses).",
    )

    @model_validator(mode="after")
    def _fp8_blocks_fit(self) -> TinyMoeSpec:
        """A block-FP8 checkpoint needs widths that are whole blocks; say so here, not in vLLM's weight loader."""
        if self.fp8_checkpoint == "block_128":
            for name in ("hidden_size", "intermediate_size"):
                if getattr(self, name) % FP8_BLOCK:
                    raise ValueError(f"fp8_checkpoint block_128 needs {name} to be a multiple of {FP8_BLOCK}")
        return self

    @property
    def head_width(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def vocab_size(self) -> int:
        return len(SPECIAL_TOKENS) + len(PRINTABLE_ASCII)

    def cache_key(self) -> str:
        # A field added later is left out at its default, so models already cached on nodes keep their key.
        unset_later = {"fp8_checkpoint"} if self.fp8_checkpoint == "none" else set()
        return hashlib.sha256(self.model_dump_json(exclude=unset_later).encode()).hexdigest()[:12]


def default_cache_dir() -> Path:
    return Path(os.environ.get("MOEPERF_CACHE_DIR", Path.home() / ".cache" / "moeperf"))


def _common_config(spec: TinyMoeSpec) -> dict[str, object]:
    return {
        "hidden_size": spec.hidden_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_width,
        "num_experts_per_tok": spec.num_experts_per_tok,
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "rope_theta": 1e6,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
        "sliding_window": None,
        "output_router_logits": False,
        "router_aux_loss_coef": 0.0,
    }


def _mixtral_config(spec: TinyMoeSpec) -> dict[str, object]:
    return _common_config(spec) | {
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "intermediate_size": spec.intermediate_size,
        "num_local_experts": spec.num_local_experts,
        "rms_norm_eps": 1e-5,
    }


def _qwen3_moe_config(spec: TinyMoeSpec) -> dict[str, object]:
    """Every layer sparse, as in Qwen3-30B-A3B; intermediate_size is then unused but must exist."""
    return _common_config(spec) | {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "intermediate_size": spec.intermediate_size,
        "moe_intermediate_size": spec.intermediate_size,
        "num_experts": spec.num_local_experts,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "rms_norm_eps": 1e-6,
    }


CONFIG_BUILDERS: dict[str, Callable[[TinyMoeSpec], dict[str, object]]] = {
    "mixtral": _mixtral_config,
    "qwen3_moe": _qwen3_moe_config,
}


def _config_json(spec: TinyMoeSpec) -> dict[str, object]:
    config = CONFIG_BUILDERS[spec.architecture](spec)
    quant = FP8_CHECKPOINT_CONFIGS[spec.fp8_checkpoint]
    return config if quant is None else config | {"quantization_config": quant}


def _tokenizer_json() -> dict[str, object]:
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in PRINTABLE_ASCII:
        vocab[ch] = len(vocab)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": t,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i, t in enumerate(SPECIAL_TOKENS)
        ],
        "normalizer": None,
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {"type": "Fuse"},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": "<unk>",
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [],
        },
    }


def _tokenizer_config_json() -> dict[str, object]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": 1 << 20,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
    }


def ensure_tiny_model(spec: TinyMoeSpec, cache_dir: Path | None = None) -> Path:
    """Write the model directory once per spec; concurrent callers on one node are safe.

    Files go to a temporary sibling that is renamed into place, so a reader never sees a
    half-written directory.
    """
    root = (cache_dir or default_cache_dir()) / "models"
    target = root / f"tiny-{spec.architecture}-{spec.cache_key()}"
    if (target / "config.json").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{target.name}.{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    files = {
        "config.json": _config_json(spec),
        "tokenizer.json": _tokenizer_json(),
        "tokenizer_config.json": _tokenizer_config_json(),
        "generation_config.json": {"bos_token_id": 1, "eos_token_id": 2},
        "moeperf_spec.json": spec.model_dump(),
    }
    for name, content in files.items():
        (tmp / name).write_text(json.dumps(content, indent=2))
    try:
        tmp.rename(target)
    except OSError:
        if not (target / "config.json").exists():
            raise
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
    return target
