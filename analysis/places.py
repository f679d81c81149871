"""Each arm's place among its round's engines, and whether a comparison can tell an arm from its place.

Why: interleaved engines run one after another on the same GPU, and an engine's place in its round can matter on
its own. On the H200 (2026-12-03) the middle engine of both rounds of claim 1's steady series was 10-11% slower at
c=64 than the other two; it was the A/A control both times, because mirrored rounds (A B C, C B A) keep the middle
arm in the middle. An arm that held one place in every round is confounded with that place: its comparison, or
the noise floor it sets, may be the place's. Runs since then rotate the order every pair of rounds
(``cluster.orchestration.driver.arm_order``): with three arms, from round 2 on no arm has held one place.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from result_format.run_result import TurnRecord

Places = dict[str, dict[int, int]]
"""arm -> round -> place (1 = its round's first engine)."""


def arm_places(turns: Sequence[TurnRecord]) -> Places:
    """Places of the interleaved measured turns, in the order the driver ran them (parallel turns have none)."""
    seen: defaultdict[int, int] = defaultdict(int)
    out: Places = {}
    for t in turns:
        if t.kind != "measured" or len(t.arms) != 1:
            continue
        seen[t.round] += 1
        out.setdefault(t.arms[0], {})[t.round] = seen[t.round]
    return out


def place_note(places: Mapping[str, Mapping[int, int]], arms: Sequence[str]) -> str | None:
    """Why a comparison of ``arms`` (A, B and the controls its noise floor rests on) may be a place effect: over
    the two or more rounds they share, one of them held the same place in every round. None when each moved."""
    if not arms or any(a not in places for a in arms):
        return None
    shared = sorted(set.intersection(*(set(places[a]) for a in arms)))
    if len(shared) < 2:
        return None
    fixed = [a for a in arms if len({places[a][r] for r in shared}) == 1]
    if not fixed:
        return None
    where = "; ".join(f"{a} {', '.join(str(places[a][r]) for r in shared)}" for a in arms)
    who = f"{fixed[0]} held" if len(fixed) == 1 else f"{', '.join(fixed)} each held"
    return (
        f"engine places in rounds {', '.join(map(str, shared))} ({where}): {who} one place in every round, so an "
        "effect of an engine's place on the machine reads as an effect of the arm; more rounds rotate the order"
    )
