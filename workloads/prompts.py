"""Prompts as token ids: exact lengths without knowing the model's tokenizer.

vLLM's /v1/completions accepts a list of token ids as the prompt, so a prompt of N ids is exactly
N prompt tokens for any model. Ids are drawn from a range that avoids special tokens; each request
gets its own ids (seeded by index) so one request's prompt is not a cached prefix of another's.
"""

from __future__ import annotations

import numpy as np


def prompt_token_ids(index: int, num_tokens: int, vocab_lo: int, vocab_hi: int, seed: int = 0) -> list[int]:
    if not 0 <= vocab_lo < vocab_hi:
        raise ValueError(f"empty token id range [{vocab_lo}, {vocab_hi})")
    rng = np.random.default_rng([seed, index])
    return rng.integers(vocab_lo, vocab_hi, size=num_tokens).tolist()
