"""Prompts as token ids: exact lengths without knowing the model's tokenizer.

vLLM's /v1/completions accepts a list of token ids as the prompt, so a prompt of N ids is exactly
N prompt tokens for any model. Ids are drawn from a range that avoids special tokens. Shared blocks
are seeded by their key alone, so equal keys give identical tokens wherever they appear (the
engine's prefix cache sees the sharing the trace describes); the rest of a prompt is seeded by the
request's index, so one request's prompt is not a cached prefix of another's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache

import numpy as np

_BLOCK_DOMAIN = 0x5EED_B10C  # keeps block seeds apart from per-request seeds


def _check_range(vocab_lo: int, vocab_hi: int) -> None:
    if not 0 <= vocab_lo < vocab_hi:
        raise ValueError(f"empty token id range [{vocab_lo}, {vocab_hi})")


def _segments(num_tokens: int, shared_blocks: Sequence[tuple[int, int]]) -> Iterator[tuple[int | None, int, int]]:
    """How a prompt of ``num_tokens`` is laid out: ``(key, block tokens, tokens taken)`` for each shared block
    it opens with (the last one possibly cut), then ``(None, n, n)`` for the ``n`` tokens of its own, if any."""
    have = 0
    for key, n in shared_blocks:
        if have >= num_tokens:
            break
        take = min(n, num_tokens - have)
        yield key, n, take
        have += take
    if have < num_tokens:
        yield None, num_tokens - have, num_tokens - have


def prompt_token_ids(index: int, num_tokens: int, vocab_lo: int, vocab_hi: int, seed: int = 0) -> list[int]:
    _check_range(vocab_lo, vocab_hi)
    rng = np.random.default_rng([seed, index])
    return rng.integers(vocab_lo, vocab_hi, size=num_tokens).tolist()


@lru_cache(maxsize=4096)
def _block(key: int, num_tokens: int, vocab_lo: int, vocab_hi: int, seed: int) -> tuple[int, ...]:
    rng = np.random.default_rng([seed, _BLOCK_DOMAIN, key])
    return tuple(rng.integers(vocab_lo, vocab_hi, size=num_tokens).tolist())


def block_token_ids(key: int, num_tokens: int, vocab_lo: int, vocab_hi: int, seed: int = 0) -> list[int]:
    """A shared block; numpy draws sequentially, so a shorter block with the same key is a prefix of a longer one."""
    _check_range(vocab_lo, vocab_hi)
    if key < 0:
        raise ValueError(f"block key must be >= 0, got {key}")
    return list(_block(key, num_tokens, vocab_lo, vocab_hi, seed))


def request_prompt_ids(
    index: int,
    num_tokens: int,
    shared_blocks: Sequence[tuple[int, int]],
    vocab_lo: int,
    vocab_hi: int,
    seed: int = 0,
) -> list[int]:
    ids: list[int] = []
    for key, _, take in _segments(num_tokens, shared_blocks):
        if key is None:
            ids += prompt_token_ids(index, take, vocab_lo, vocab_hi, seed)
        else:
            ids += block_token_ids(key, take, vocab_lo, vocab_hi, seed)
    return ids


# --- the same prompts as numpy arrays and as JSON text, for the body producer (workloads.payloads) ---------
# The list functions above stay the reference; these draw the same numbers with the same calls over the same
# ``_segments``, so a body built here holds exactly the ids of ``request_prompt_ids`` (tests/unit/
# test_client_payloads.py checks it). They exist because an 8,000-token prompt costs about 1.2 ms as ``tolist()``
# plus ``json.dumps`` and about 0.1 ms as an array written through a lookup table.


@lru_cache(maxsize=4096)
def _block_array(key: int, num_tokens: int, vocab_lo: int, vocab_hi: int, seed: int) -> np.ndarray:
    """A whole shared block, read-only; a shorter use of it is a prefix (numpy draws sequentially)."""
    ids = np.random.default_rng([seed, _BLOCK_DOMAIN, key]).integers(vocab_lo, vocab_hi, size=num_tokens)
    ids.flags.writeable = False
    return ids


def request_prompt_array(
    index: int,
    num_tokens: int,
    shared_blocks: Sequence[tuple[int, int]],
    vocab_lo: int,
    vocab_hi: int,
    seed: int = 0,
) -> np.ndarray:
    """``request_prompt_ids`` as an int64 array (same ids, same order)."""
    _check_range(vocab_lo, vocab_hi)
    parts: list[np.ndarray] = []
    for key, n, take in _segments(num_tokens, shared_blocks):
        if key is None:
            parts.append(np.random.default_rng([seed, index]).integers(vocab_lo, vocab_hi, size=take))
        elif key < 0:
            raise ValueError(f"block key must be >= 0, got {key}")
        else:
            parts.append(_block_array(key, n, vocab_lo, vocab_hi, seed)[:take])
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


@lru_cache(maxsize=8)
def _id_texts(vocab_hi: int) -> np.ndarray:
    """``b"<id>,"`` for every id below ``vocab_hi``, as fixed-width bytes (numpy pads the short ones with NULs)."""
    width = len(str(vocab_hi - 1))
    return np.char.add(np.arange(vocab_hi).astype(f"S{width}"), b",")


def ids_json(ids: np.ndarray, vocab_hi: int) -> bytes:
    """The ids as the inside of a compact JSON list, ``b"12,7,3"``: what ``json.dumps(ids.tolist())`` writes
    between the brackets (without its spaces). One gather from a table and one C-level NUL removal."""
    if ids.size == 0:
        return b""
    if int(ids.min()) < 0 or int(ids.max()) >= vocab_hi:
        raise ValueError(f"token ids outside [0, {vocab_hi})")
    return _id_texts(vocab_hi)[ids].tobytes().replace(b"\0", b"")[:-1]
