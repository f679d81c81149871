"""ShareGPT JSON: a list of {"id", "conversations": [{"from": "human"|"gpt", "value": text}, ...]}.

Lengths come from the engine's own tokenizer (a ``tokenizer.json`` or a Hugging Face model
folder); without one, one token per UTF-8 byte, which is exact for the embedded tiny model's
byte-level tokenizer. Single-turn takes each conversation's first exchange, as ``vllm bench
serve`` does. Multi-turn makes every exchange a request chained to the one before it: its prompt
opens with the whole history as shared blocks (so the prefix cache sees the conversation), and it
is sent only after the previous answer arrived. The history's assistant turns are synthetic tokens
of the reference answer's length, not what the engine generated.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from common.strict import FrozenStrictModel
from workloads.schedule import TraceRow
from workloads.traces.base import LoadedTrace, TraceFormatError, non_empty, resolve_trace_path

# Block keys of conversation history live far above any trace's hash ids.
_HISTORY_KEY_BASE = 1 << 40


class ShareGptTraceSpec(FrozenStrictModel):
    kind: Literal["sharegpt"] = "sharegpt"
    path: Path = Field(Path("sharegpt_sample.json"), description="ShareGPT JSON file.")
    max_requests: int | None = Field(None, ge=1, description="Stop after this many requests.")
    tokenizer: str | None = Field(
        None,
        description="tokenizer.json file or Hugging Face model folder/id of the engine's tokenizer; "
        "null: one token per UTF-8 byte (exact for the embedded tiny model).",
    )
    multi_turn: bool = Field(False, description="Every exchange a request, chained to the previous one.")
    max_turns: int | None = Field(None, ge=1, description="Use at most this many exchanges per conversation.")


def _byte_count(text: str) -> int:
    return len(text.encode())


def token_counter(name: str | None) -> Callable[[str], int]:
    if name is None:
        return _byte_count
    p = Path(name).expanduser()
    if p.is_file():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(p))
        return lambda text: len(tok.encode(text, add_special_tokens=False).ids)
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(name)
    return lambda text: len(hf.encode(text, add_special_tokens=False))


def _exchanges(path: Path, i: int, conv: Any) -> list[tuple[str, str]] | None:
    """(user, assistant) pairs; None when the entry is not a conversation at all."""
    turns = conv.get("conversations") if isinstance(conv, dict) else None
    if not isinstance(turns, list):
        return None
    pairs, user = [], None
    for t in turns:
        if not isinstance(t, dict) or not isinstance(t.get("value"), str) or t.get("from") is None:
            raise TraceFormatError(path, f"entry {i}: each turn needs 'from' and a string 'value'")
        if t["from"] in ("human", "user"):
            user = t["value"]
        elif t["from"] in ("gpt", "assistant", "chatgpt") and user is not None:
            pairs.append((user, t["value"]))
            user = None
    return pairs


def load_sharegpt(spec: ShareGptTraceSpec, base_dir: Path | None = None) -> LoadedTrace:
    path = resolve_trace_path(spec.path, base_dir)
    try:
        data = json.loads(path.read_text() or "[]")
    except json.JSONDecodeError as e:
        raise TraceFormatError(path, f"not JSON: {e.msg}", line=e.lineno) from None
    if not isinstance(data, list):
        raise TraceFormatError(path, "expected a JSON list of conversations")
    count = token_counter(spec.tokenizer)
    out = LoadedTrace(rows=[])
    for i, conv in enumerate(data):
        pairs = _exchanges(path, i, conv)
        if pairs is None:
            raise TraceFormatError(path, f"entry {i}: no 'conversations' list")
        if not pairs:
            out.skip("conversation without an answered user turn")
            continue
        pairs = pairs[: spec.max_turns] if spec.multi_turn else pairs[:1]
        history: list[tuple[int, int]] = []
        prev: int | None = None
        for turn, (user, answer) in enumerate(pairs):
            user_tokens, answer_tokens = count(user), count(answer)
            if user_tokens == 0 or answer_tokens == 0:
                out.skip("empty user turn or answer")
                break
            key = _HISTORY_KEY_BASE + (i << 12) + 2 * turn
            blocks = (*history, (key, user_tokens))
            out.rows.append(
                TraceRow(
                    arrival_s=None,
                    input_tokens=sum(n for _, n in blocks),
                    output_tokens=answer_tokens,
                    shared_blocks=blocks if spec.multi_turn else (),
                    follows=prev,
                )
            )
            prev = len(out.rows) - 1
            history = [*blocks, (key + 1, answer_tokens)]
            if spec.max_requests is not None and len(out.rows) >= spec.max_requests:
                return non_empty(path, out)
    return non_empty(path, out)
