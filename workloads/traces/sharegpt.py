"""ShareGPT JSON: a list of {"id", "conversations": [{"from": "human"|"gpt", "value": text}, ...]}.

Lengths come from the engine's own tokenizer (a ``tokenizer.json`` or a Hugging Face model
folder); without one, one token per UTF-8 byte, which is exact for the embedded tiny model's
byte-level tokenizer. Single-turn takes each conversation's first exchange, as ``vllm bench
serve`` does. Multi-turn makes every exchange a request chained to the one before it: its prompt
opens with the whole history as shared blocks (so the prefix cache sees the conversation), and it
is sent only after the previous answer arrived. The history's assistant turns are synthetic tokens
of the reference answer's length, not what the engine generated.

The file is read as a stream, so memory is one conversation, not the file (the published ShareGPT
files are arrays of hundreds of megabytes): a JSON array is parsed one element at a time, and a
``.jsonl`` file (one conversation per line) one line at a time. Only a file that json must reject
anyway is parsed whole, to report json's own message and line. Chaining needs no map across
conversations: a conversation's turns are consecutive rows, so the state is that conversation's
history and the position of its previous row.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, TextIO

from pydantic import Field

from common.strict import FrozenStrictModel
from workloads.schedule import TraceRow
from workloads.traces.base import (
    LoadedTrace,
    TraceFormatError,
    collect,
    count_skip,
    json_lines,
    limited_rows,
    resolve_trace_path,
)

# Block keys of conversation history live far above any trace's hash ids.
_HISTORY_KEY_BASE = 1 << 40
# Text read at a time from a JSON array; a longer element grows the read geometrically.
_CHUNK_CHARS = 1 << 16
_DECODER = json.JSONDecoder()
_NOT_WHITESPACE = re.compile(r"[^ \t\n\r]")  # json's own whitespace set
_SCALAR_TAIL = re.compile(r"[0-9A-Za-z.+\-]*")


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


def _exchanges(path: Path, i: int, conv: Any, line: int | None = None) -> list[tuple[str, str]] | None:
    """(user, assistant) pairs; None when the entry is not a conversation at all."""
    turns = conv.get("conversations") if isinstance(conv, dict) else None
    if not isinstance(turns, list):
        return None
    pairs, user = [], None
    for t in turns:
        if not isinstance(t, dict) or not isinstance(t.get("value"), str) or t.get("from") is None:
            raise TraceFormatError(path, f"entry {i}: each turn needs 'from' and a string 'value'", line=line)
        if t["from"] in ("human", "user"):
            user = t["value"]
        elif t["from"] in ("gpt", "assistant", "chatgpt") and user is not None:
            pairs.append((user, t["value"]))
            user = None
    return pairs


class _ArrayReader:
    """The elements of a top-level JSON array, one at a time, from a file read in chunks.

    Memory is one element plus a chunk. A failed parse of an element may only mean that it goes on
    past the text read so far, so it is retried with more text until the file ends; the error then
    raised is json's own for that element (same scanner, same message) at the line it names in the
    whole file. A misplaced ``,`` or ``]`` between elements is left to a whole-file parse, whose
    message differs between Python versions.
    """

    def __init__(self, path: Path, f: TextIO) -> None:
        self.path, self.f = path, f
        self.buf, self.pos = "", 0
        self.lines_before = 0  # newlines in the text already dropped from buf
        self.eof = False
        self.read_any = False

    def _fill(self) -> bool:
        """More text after what is buffered (False at the end), dropping what was consumed."""
        if self.eof:
            return False
        rest = self.buf[self.pos :]
        chunk = self.f.read(max(_CHUNK_CHARS, len(rest)))  # geometric: a long element costs linear time
        if not chunk:
            self.eof = True
            return False  # buf untouched, so positions into it stay valid for the error
        self.read_any = True
        self.lines_before += self.buf.count("\n", 0, self.pos)
        self.buf, self.pos = rest + chunk, 0
        return True

    def peek(self) -> str:
        """The next character that is not whitespace, '' at the end of the file."""
        while True:
            m = _NOT_WHITESPACE.search(self.buf, self.pos)
            if m is not None:
                self.pos = m.start()
                return self.buf[self.pos]
            self.pos = len(self.buf)
            if not self._fill():
                return ""

    def error(self, msg: str, at: int) -> TraceFormatError:
        return TraceFormatError(self.path, f"not JSON: {msg}", line=self.lines_before + self.buf.count("\n", 0, at) + 1)

    def _value(self) -> Any:
        while True:
            try:
                obj, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                if self._fill():
                    continue
                raise self.error(e.msg, e.pos) from None
            tail = _SCALAR_TAIL.match(self.buf, end)
            if not isinstance(obj, dict | list | str) and tail is not None and tail.end() == len(self.buf):
                if self._fill():  # a number or literal that reaches the end of the text read may go on ("12" of "123")
                    continue
            self.pos = end
            return obj

    def elements(self) -> Iterator[Any]:
        """Call once ``peek()`` has returned '['."""
        self.pos += 1
        if self.peek() != "]":
            while True:
                yield self._value()
                c = self.peek()
                if c == "]":
                    break
                if c != ",":
                    raise _whole_file_error(self.path, self.error("Expecting ',' delimiter", self.pos))
                self.pos += 1
                if self.peek() == "]":
                    raise _whole_file_error(self.path, self.error("Expecting value", self.pos))
        self.pos += 1
        if self.peek() != "":
            raise _whole_file_error(self.path, self.error("Extra data", self.pos))


def _whole_file_error(path: Path, fallback: TraceFormatError) -> TraceFormatError:
    """The error of parsing the file whole, as the list loader did; ``fallback`` if that finds nothing wrong."""
    try:
        data = json.loads(path.read_text() or "[]")
    except json.JSONDecodeError as e:
        return TraceFormatError(path, f"not JSON: {e.msg}", line=e.lineno)
    if not isinstance(data, list):
        return TraceFormatError(path, "expected a JSON list of conversations")
    return fallback


def _entries(path: Path, skipped: dict[str, int]) -> Iterator[tuple[int, Any, int | None]]:
    """(index, entry, line) for every conversation; the line only where the format has one per entry."""
    with path.open() as f:
        if path.suffix == ".jsonl":
            yield from _jsonl_entries(path, f, skipped)
            return
        reader = _ArrayReader(path, f)
        first = reader.peek()
        if first == "" and not reader.read_any:
            return  # an empty file is an empty list, as it always was
        if first != "[":
            raise _whole_file_error(path, TraceFormatError(path, "expected a JSON list of conversations"))
        for i, conv in enumerate(reader.elements()):
            yield i, conv, None


def _jsonl_entries(path: Path, f: TextIO, skipped: dict[str, int]) -> Iterator[tuple[int, Any, int | None]]:
    for i, (line, conv) in enumerate(json_lines(path, f, skipped)):
        yield i, conv, line


def iter_sharegpt(spec: ShareGptTraceSpec, base_dir: Path | None, skipped: dict[str, int]) -> Iterator[TraceRow]:
    path = resolve_trace_path(spec.path, base_dir)
    return limited_rows(path, _rows(path, spec, skipped), spec.max_requests, skipped)


def _rows(path: Path, spec: ShareGptTraceSpec, skipped: dict[str, int]) -> Iterator[TraceRow]:
    count: Callable[[str], int] | None = None
    n_rows = 0  # ``follows`` is a position among all rows of the trace
    for i, conv, line in _entries(path, skipped):
        count = count or token_counter(spec.tokenizer)
        pairs = _exchanges(path, i, conv, line)
        if pairs is None:
            raise TraceFormatError(path, f"entry {i}: no 'conversations' list", line=line)
        if not pairs:
            count_skip(skipped, "conversation without an answered user turn")
            continue
        pairs = pairs[: spec.max_turns] if spec.multi_turn else pairs[:1]
        history: list[tuple[int, int]] = []
        prev: int | None = None
        for turn, (user, answer) in enumerate(pairs):
            user_tokens, answer_tokens = count(user), count(answer)
            if user_tokens == 0 or answer_tokens == 0:
                count_skip(skipped, "empty user turn or answer")
                break
            key = _HISTORY_KEY_BASE + (i << 12) + 2 * turn
            blocks = (*history, (key, user_tokens))
            yield TraceRow(
                arrival_s=None,
                input_tokens=sum(n for _, n in blocks),
                output_tokens=answer_tokens,
                shared_blocks=blocks if spec.multi_turn else (),
                follows=prev,
                line=line,
            )
            prev, n_rows = n_rows, n_rows + 1
            history = [*blocks, (key + 1, answer_tokens)]


def load_sharegpt(spec: ShareGptTraceSpec, base_dir: Path | None = None) -> LoadedTrace:
    skipped: dict[str, int] = {}
    return collect(iter_sharegpt(spec, base_dir, skipped), skipped)
