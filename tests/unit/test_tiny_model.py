import json

from transformers import AutoTokenizer

from cluster.tiny_model import PRINTABLE_ASCII, SPECIAL_TOKENS, TinyMoeSpec, ensure_tiny_model


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
