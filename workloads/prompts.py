"""Prompts as token ids: exact lengths without knowing the model's tokenizer.

vLLM's /v1/completions accepts a list of token ids as the prompt, so a prompt of N ids is exactly
N prompt tokens for any model. Ids are drawn from a range that avoids special tokens. Shared blocks
are seeded by their key alone, so equal keys give identical tokens wherever they appear (the
engine's prefix cache sees the sharing the trace describes); the rest of a prompt is seeded by the
request's index, so one request's prompt is not a cached prefix of another's.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

_BLOCK_DOMAIN = 0x5EED_B10C  # keeps block seeds apart from per-request seeds


def prompt_token_ids(index: int, num_tokens: int, vocab_lo: int, vocab_hi: int, seed: int = 0) -> list[int]:
    if not 0 <= vocab_lo < vocab_hi:
        raise ValueError(f"empty token id range [{vocab_lo}, {vocab_hi})")
    rng = np.random.default_rng([seed, index])
    return rng.integers(vocab_lo, vocab_hi, size=num_tokens).tolist()


@lru_cache(maxsize=4096)
def _block(key: int, num_tokens: int, vocab_lo: int, vocab_hi: int, seed: int) -> tuple[int, ...]:
    rng = np.random.default_rng([seed, _BLOCK_DOMAIN, key])
    return tuple(rng.integers(vocab_lo, vocab_hi, size=num_tokens).tolist())


def block_token_ids(key: int, num_tokens: int, vocab_lo: int, vocab_hi: int, seed: int = 0) -> list[int]:
    """A shared block; numpy draws sequentially, so a shorter block with the same key is a prefix of a longer one."""
    if not 0 <= vocab_lo < vocab_hi:
        raise ValueError(f"empty token id range [{vocab_lo}, {vocab_hi})")
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
    for key, n in shared_blocks:
        if len(ids) >= num_tokens:
            break
        ids += block_token_ids(key, min(n, num_tokens - len(ids)), vocab_lo, vocab_hi, seed)
    if len(ids) < num_tokens:
        ids += prompt_token_ids(index, num_tokens - len(ids), vocab_lo, vocab_hi, seed)
    return ids
