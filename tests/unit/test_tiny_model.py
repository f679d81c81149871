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
