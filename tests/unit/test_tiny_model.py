import json

import pytest
from transformers import AutoTokenizer

from modelgen.tiny_moe import PRINTABLE_ASCII, SPECIAL_TOKENS, TinyMoeSpec, ensure_tiny_model


def test_generated_model_is_mixtral_shaped_and_cached(tmp_path):
    spec = TinyMoeSpec()
    path = ensure_tiny_model(spec, tmp_path)
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["architectures"] == ["MixtralForCausalLM"]
    assert (cfg["num_local_experts"], cfg["num_experts_per_tok"]) == (8, 2)
    mtime = (path / "config.json").stat().st_mtime_ns
    assert ensure_tiny_model(spec, tmp_path) == path
    assert (path / "config.json").stat().st_mtime_ns == mtime
    assert ensure_tiny_model(TinyMoeSpec(num_hidden_layers=3), tmp_path) != path


def test_every_token_id_decodes_to_exactly_one_character(tmp_path):
    path = ensure_tiny_model(TinyMoeSpec(), tmp_path)
    tok = AutoTokenizer.from_pretrained(str(path))
    assert len(tok) == TinyMoeSpec().vocab_size
    ids = list(range(len(SPECIAL_TOKENS), len(tok)))
    assert tok.decode(ids) == "".join(PRINTABLE_ASCII)
    text = "hello, MoE world"
    assert tok(text)["input_ids"] == [len(SPECIAL_TOKENS) + PRINTABLE_ASCII.index(c) for c in text]


def test_qwen3_moe_shape_loads_with_the_real_per_layer_widths(tmp_path):
    """Qwen3-30B-A3B's layer: 128 experts of 768, top-8, 32 query / 4 KV heads of 128 over a 2048 model width."""
    from transformers import AutoConfig

    spec = TinyMoeSpec(architecture="qwen3_moe", num_hidden_layers=4, hidden_size=2048, intermediate_size=768,
                       num_local_experts=128, num_experts_per_tok=8, num_attention_heads=32, num_key_value_heads=4,
                       head_dim=128)  # fmt: skip
    path = ensure_tiny_model(spec, tmp_path)
    assert path.name.startswith("tiny-qwen3_moe-")
    cfg = AutoConfig.from_pretrained(str(path))
    assert cfg.architectures == ["Qwen3MoeForCausalLM"]
    assert (cfg.num_experts, cfg.num_experts_per_tok, cfg.moe_intermediate_size) == (128, 8, 768)
    assert (cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads) == (2048, 128, 32, 4)
    assert cfg.decoder_sparse_step == 1 and cfg.mlp_only_layers == [] and cfg.norm_topk_prob
    assert ensure_tiny_model(spec.model_copy(update={"architecture": "mixtral"}), tmp_path) != path


@pytest.mark.parametrize(
    ("kind", "activation_scheme", "block"),
    [("per_tensor_static", "static", None), ("block_128", "dynamic", [128, 128])],
)
def test_fp8_checkpoint_is_read_by_vllm_as_the_scheme_asked_for(tmp_path, kind, activation_scheme, block):
    """vLLM's own FP8 config parser decides the backend routing; it must see a serialised FP8 checkpoint."""
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    spec = TinyMoeSpec(hidden_size=256, intermediate_size=512, fp8_checkpoint=kind)
    cfg = json.loads((ensure_tiny_model(spec, tmp_path) / "config.json").read_text())
    fp8 = Fp8Config.from_config(cfg["quantization_config"])
    assert fp8.is_checkpoint_fp8_serialized
    assert (fp8.activation_scheme, fp8.weight_block_size) == (activation_scheme, block)


def test_bf16_model_has_no_quantization_config_and_keeps_its_cache_key(tmp_path):
    cfg = json.loads((ensure_tiny_model(TinyMoeSpec(), tmp_path) / "config.json").read_text())
    assert "quantization_config" not in cfg
    # The key of the default model from before fp8_checkpoint existed: caches on nodes stay valid.
    assert TinyMoeSpec().cache_key() == "ee5408eded97"
    assert TinyMoeSpec(fp8_checkpoint="per_tensor_static").cache_key() != TinyMoeSpec().cache_key()


def test_block_fp8_checkpoint_needs_whole_blocks():
    with pytest.raises(ValueError, match="intermediate_size to be a multiple of 128"):
        TinyMoeSpec(hidden_size=256, intermediate_size=200, fp8_checkpoint="block_128")


@pytest.mark.parametrize(
    "spec",
    [
        TinyMoeSpec(num_hidden_layers=32, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                    num_key_value_heads=8, max_position_embeddings=32768),  # Mixtral-8x7B
        TinyMoeSpec(architecture="qwen3_moe", num_hidden_layers=48, hidden_size=2048, intermediate_size=768,
                    num_local_experts=128, num_experts_per_tok=8, num_attention_heads=32, num_key_value_heads=4,
                    head_dim=128, max_position_embeddings=32768),  # Qwen3-30B-A3B
    ],
    ids=["mixtral-8x7b-32-layers", "qwen3-30b-a3b-48-layers"],
)  # fmt: skip
def test_full_depth_models_are_written_at_their_real_depth(tmp_path, spec):
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(str(ensure_tiny_model(spec, tmp_path)))
    assert cfg.num_hidden_layers == spec.num_hidden_layers
