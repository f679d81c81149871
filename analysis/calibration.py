"""Measured false-positive rate: repeated A/A comparisons of recorded samples.

Each trial splits one arm's recorded requests at random into two halves and compares them as if
they were two arms. Both halves come from the same engine, so every verdict other than "no
detectable difference" is a false positive; the share of trials with any is the rate the nightly
would cry wolf at. It reuses recorded samples, so it costs seconds, not GPU hours.
"""

from __future__ import annotations

import numpy as np

from analysis.samples import ArmSamples
from analysis.verdicts import AnalysisSettings, compare_samples


def subset(arm: ArmSamples, idx: np.ndarray, name: str) -> ArmSamples:
    """The requests ``idx`` of ``arm`` as an arm of their own (ITL segments carried along)."""
    lengths = np.diff(arm.itl_offsets)[idx]
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    return ArmSamples(
        name=name,
        ttft_s=arm.ttft_s[idx],
        tpot_s=arm.tpot_s[idx],
        e2e_s=arm.e2e_s[idx],
        itl_flat_s=arm.itl_of(idx),
        itl_offsets=offsets,
        output_tokens=arm.output_tokens[idx],
        start_s=arm.start_s[idx],
        end_s=arm.end_s[idx],
        slo_met=arm.slo_met[idx],
        rounds=arm.rounds[idx],
        slots=np.arange(idx.size, dtype=np.int64),
    )


def aa_false_positive_rate(arm: ArmSamples, trials: int, settings: AnalysisSettings) -> float:
    """Share of random half/half splits of ``arm`` given any verdict other than no detectable difference."""
    rng = np.random.default_rng(settings.seed)
    flagged = 0
    for _ in range(trials):
        perm = rng.permutation(arm.n)
        half = arm.n // 2
        a = subset(arm, np.sort(perm[:half]), "A")
        b = subset(arm, np.sort(perm[half : 2 * half]), "A'")
        c = compare_samples(a, b, settings, kind="aa", rng=rng)
        if any(m.verdict in ("regressed", "improved") for m in c.metrics):
            flagged += 1
    return flagged / trials
