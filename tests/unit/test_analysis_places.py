"""An arm's place among its round's engines, from the turns the driver recorded."""

from analysis.places import arm_places, place_note
from result_format.run_result import TurnRecord

T = "2026-12-03T00:00:00+00:00"


def turns(*rounds):
    return [TurnRecord(kind="measured", round=r, arms=list(names), started_at=T) for r, names in rounds]


def test_two_arms_alternate_so_neither_is_tied_to_a_place():
    places = arm_places(turns((0, "a"), (0, "b"), (1, "b"), (1, "a")))
    assert places == {"a": {0: 1, 1: 2}, "b": {0: 2, 1: 1}}
    assert place_note(places, ["a", "b"]) is None


def test_warm_up_turns_and_parallel_rounds_have_no_places():
    warm = [TurnRecord(kind="warmup", round=0, arms=["a"], started_at=T)]
    assert arm_places(warm) == {}
    assert arm_places(warm + turns((0, ["a", "b"]), (1, ["a", "b"]))) == {}


def test_one_round_says_nothing_and_an_arm_missing_a_round_is_judged_on_the_shared_ones():
    assert place_note(arm_places(turns((0, "a"), (0, "c"), (0, "b"))), ["a", "b", "c"]) is None
    places = arm_places(turns((0, "a"), (0, "c"), (0, "b"), (1, "b"), (1, "c"), (1, "a"), (2, "a"), (2, "b")))
    note = place_note(places, ["a", "b", "c"])
    assert note is not None and "rounds 0, 1 (" in note and "c held one place" in note
