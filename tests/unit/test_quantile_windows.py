"""The bootstrap's windowed quantiles (what a production-length run's tokens take) equal the exact ones, on every
replicate, whether a replicate's quantile falls inside its window or outside it (then the exact path)."""

import numpy as np
import pytest

import analysis.quantile_windows as qw
import analysis.stats as st
from analysis.samples import ArmSamples, from_arrays


def _arm(n: int, seed: int) -> ArmSamples:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, 40, n)
    arm = from_arrays(
        "a", rng.lognormal(-3, 0.3, n), rng.lognormal(-4.5, 0.3, n), tokens, np.sort(rng.uniform(0, 100, n)),
        rounds=rng.integers(0, 2, n),
    )  # fmt: skip
    # Gaps that vary inside a request, so the ITL family holds one value per token, as real ones do.
    jitter = rng.lognormal(0, 0.2, arm.itl_flat_s.size)
    return ArmSamples(**{**{k: getattr(arm, k) for k in ArmSamples.__dataclass_fields__ if k not in ("_families",
                                                                                                    "cache")},
                         "itl_flat_s": arm.itl_flat_s * jitter})  # fmt: skip


def _both(
    monkeypatch: pytest.MonkeyPatch, arm: ArmSamples, counts: np.ndarray, rounds: list[int] | None, sigmas: float
):
    monkeypatch.setattr(st, "EXACT_BELOW_VALUES", 10**12)
    exact = st.quantile_values(arm, counts, rounds)
    monkeypatch.setattr(st, "EXACT_BELOW_VALUES", 0)
    monkeypatch.setattr(st, "WINDOW_SIGMAS", sigmas)
    arm.cache.clear()
    return exact, st.quantile_values(arm, counts, rounds)


@pytest.mark.parametrize("n", [1, 2, 7, 4000])
@pytest.mark.parametrize("sigmas", [5.0, 0.05], ids=["windows", "mostly-outside"])
@pytest.mark.parametrize("rounds", [None, [1]], ids=["all-rounds", "one-round"])
def test_windowed_quantiles_are_the_exact_ones(monkeypatch, n, sigmas, rounds):
    arm = _arm(n, seed=n)
    (counts,) = st.slot_bootstrap([arm], [0, 1], 150, np.random.default_rng(n))
    counts = np.vstack([np.ones((1, n), dtype=np.int64), counts, np.zeros((1, n), dtype=np.int64)])
    exact, windowed = _both(monkeypatch, arm, counts, rounds, sigmas)
    assert np.array_equal(exact, windowed, equal_nan=True)
    assert np.isnan(windowed[-1]).all()  # a replicate that drew nothing has no quantile


@pytest.mark.parametrize("n", [1, 2, 7, 4000])
def test_the_estimate_of_a_large_family_is_the_exact_one(monkeypatch, n):
    arm = _arm(n, seed=n + 1)
    exact, selected = _both(monkeypatch, arm, np.ones((1, n), dtype=np.int64), [1], 5.0)
    assert np.array_equal(exact, selected, equal_nan=True)


@pytest.mark.parametrize("rounds", [None, [1]], ids=["all-rounds", "one-round"])
def test_bracketed_order_statistics_of_a_family_too_large_to_copy_give_the_same_quantiles(monkeypatch, rounds):
    arm = _arm(4000, seed=11)
    (counts,) = st.slot_bootstrap([arm], [0, 1], 100, np.random.default_rng(11))
    counts = np.vstack([np.ones((1, arm.n), dtype=np.int64), counts])
    exact, windowed = _both(monkeypatch, arm, counts, rounds, 5.0)
    monkeypatch.setattr(qw, "SELECT_SAMPLE_VALUES", 5_000)  # the ~80k gaps are bracketed, not copied
    answers, bracketed = [], qw._bracketed
    monkeypatch.setattr(qw, "_bracketed", lambda *a: answers.append(found := bracketed(*a)) or found)
    arm.cache.clear()
    assert np.array_equal(windowed, st.quantile_values(arm, counts, rounds), equal_nan=True)
    assert answers and all(found is not None for found in answers)
    assert np.array_equal(exact, windowed, equal_nan=True)


@pytest.mark.parametrize("kind", ["lognormal", "ties", "sorted", "clusters"])
@pytest.mark.parametrize("masked", [False, True])
def test_order_statistics_are_the_sorted_values_at_those_ranks(monkeypatch, kind, masked):
    rng = np.random.default_rng(len(kind) + masked)
    n = 50_000
    values = {
        "lognormal": rng.lognormal(0, 1, n),
        "ties": rng.integers(0, 5, n).astype(np.float64),  # brackets too wide: the copy
        "sorted": np.sort(rng.random(n)),
        "clusters": rng.random(n) * 1e-6 + np.repeat(rng.random(50), n // 50),
    }[kind]
    member = rng.random(n) < 0.7 if masked else None
    kept = values[member] if masked else values
    ranks = np.concatenate((rng.integers(0, kept.size, 8), [0, kept.size - 1]))
    monkeypatch.setattr(qw, "SELECT_SAMPLE_VALUES", 5_000)
    got = qw.order_statistics(values, member, kept.size, ranks)
    assert np.array_equal(got, np.sort(kept)[ranks])
    if kind != "ties":  # a continuous family is found inside its brackets, never copied
        assert qw._bracketed(values, member, kept.size, ranks[:-2]) is not None


def test_chunked_bootstrap_draws_what_one_call_draws_when_one_chunk_holds_it(monkeypatch):
    arm = _arm(300, seed=3)
    everyone = np.arange(arm.n)
    (whole,) = st.slot_bootstrap([arm], [0, 1], 40, np.random.default_rng(9))
    (chunk,) = next(st.slot_bootstrap_chunks([arm], [0, 1], 40, np.random.default_rng(9)))
    assert np.array_equal(whole, chunk.at(everyone))
    monkeypatch.setattr(st, "BOOTSTRAP_CHUNK_ELEMENTS", 300 * 7)  # 7 replicates at a time: bounded memory
    parts = [c.at(everyone) for (c,) in st.slot_bootstrap_chunks([arm], [0, 1], 40, np.random.default_rng(9))]
    assert [p.shape[0] for p in parts] == [7, 7, 7, 7, 7, 5]
    stacked = np.vstack(parts)
    for rnd in (0, 1):  # every replicate redraws each round's slots: each round's counts sum to its size
        mine = arm.rounds == rnd
        assert (stacked[:, mine].sum(axis=1) == mine.sum()).all()


def test_a_long_round_redraws_random_equal_groups_of_slots_paired_across_arms(monkeypatch):
    import analysis.resampling_units as ru

    monkeypatch.setattr(ru, "UNITS_PER_ROUND", 40)
    a, b = _arm(1000, seed=4), _arm(1000, seed=5)
    da, db = st.unit_bootstrap([a, b], [0, 1], 30, np.random.default_rng(2))
    assert da.counts is db.counts
    # B/A stays paired: a slot of a round is one unit in every arm that served it
    key_a, key_b = a.rounds * 10**6 + a.slots, b.rounds * 10**6 + b.slots
    both, ia, ib = np.intersect1d(key_a, key_b, return_indices=True)
    assert both.size > 100 and np.array_equal(da.layout.unit_of[ia], db.layout.unit_of[ib])
    for rnd in (0, 1):
        units = da.layout.unit_of[a.rounds == rnd]
        # not neighbours: a unit's slots are spread over the round, so a trend in time does not become a unit
        assert np.ptp(a.slots[a.rounds == rnd][units == units.min()]) > 0.5 * np.ptp(a.slots[a.rounds == rnd])
        assert (da.counts[:, np.unique(units)].sum(axis=1) == 40).all()  # each replicate redraws 40 units
    assert (da.counts[:, -1] == 0).all()  # the column of requests outside the drawn rounds
    sizes = np.bincount(ru.round_units(1001))
    assert sizes.size == 40 and sizes.max() - sizes.min() <= 1  # equal groups
    assert np.array_equal(ru.round_units(39), np.arange(39))  # a short round: every slot its own unit


def test_grouped_slots_give_the_standard_error_the_slots_give(monkeypatch):
    """Redrawing random groups of slots estimates the same variance as redrawing slots (its point in a
    production-length round): the log SEs of every quantile agree within the bootstrap's own noise."""
    import analysis.resampling_units as ru

    arm = _arm(6000, seed=6)
    by_slot = st.arm_log_se(arm, 400, np.random.default_rng(1))[: st.N_QUANTILE]
    monkeypatch.setattr(ru, "UNITS_PER_ROUND", 300)
    arm.cache.clear()
    by_group = st.arm_log_se(arm, 400, np.random.default_rng(1))[: st.N_QUANTILE]
    ratio = by_group / by_slot
    assert np.all(np.abs(ratio - 1) < 0.2), ratio
