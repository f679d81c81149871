"""The engine-instance term of ``analysis.design``: what an interval of B/A may never be narrower than."""

import math

import numpy as np
import pytest

from analysis import design
from analysis.stats import PairedEstimates
from analysis.verdicts import pairs_for_effect


def estimates(d, s):
    d, s = np.asarray(d, dtype=float)[:, None], np.asarray(s, dtype=float)[:, None]
    return PairedEstimates(d.mean(axis=0), np.sqrt(np.sum(s**2, axis=0)) / d.shape[0], d, s)


def test_a_comparison_with_no_within_engine_error_is_never_narrower_than_its_pairs_spread():
    """The H200 case (claim 1's steady series, c=4, 2026-12-03): every time block held the same count of completed
    requests in both arms, so the request rate's paired error was 0; the control's was 4%, so the pooled excess
    was negative and tau^2 truncated to 0, and a 3% difference got an interval of zero width and "regressed"."""
    ab = estimates([-0.0292, -0.0387], [0.0, 0.0])
    control = estimates([-0.0185, 0.0011], [0.0414, 0.0414])
    noise = design.pool([design.control_term(control), design.own_term(ab)], 1)
    assert noise.tau2[0] == 0.0 and noise.dof[0] == 3
    raw = ((-0.0292 + 0.03395) ** 2 + (-0.0387 + 0.03395) ** 2 + 0.0185**2 + 0.0011**2) / 3
    w = noise.variance(0, ab.pairs, float(ab.se_within[0]))
    assert w == pytest.approx(raw / 2)  # a plain t on the pairs' spread, not 0
    assert math.sqrt(w) > 0.007
    # and the pairs a 1% change would take are counted from the same variance, not from none
    assert pairs_for_effect(0.01, 0.0, 0.0, 2, 0.05 / 14, 0.8) == 2
    assert pairs_for_effect(0.01, 0.0, 0.0, 2, 0.05 / 14, 0.8, noise.floor(0)) > 10


def test_the_floor_leaves_a_sound_estimate_alone():
    """Pairs whose spread is what their within-engine errors say: the model's W stands (it is the larger)."""
    ab = estimates([0.01, 0.03, -0.01, 0.02], [0.02] * 4)
    control = estimates([0.015, -0.02], [0.02] * 2)
    noise = design.pool([design.control_term(control), design.own_term(ab)], 1)
    se_w = float(ab.se_within[0])
    assert noise.variance(0, ab.pairs, se_w) == pytest.approx(float(noise.tau2[0]) / 4 + se_w**2)
    assert noise.variance(0, ab.pairs, se_w) >= float(noise.pair_ms[0]) / 4


def test_no_pairs_no_floor():
    noise = design.pool([design.own_term(estimates([0.01], [0.02]))], 1)
    assert noise.dof[0] == 0 and math.isnan(noise.variance(0, 1, 0.02))
