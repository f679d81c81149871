"""Per-rank request bookkeeping from the SchedulerOutput each worker receives: TTFT and step phase.

Each rank sees the same scheduler output, so each can time its own prefill of every request without
talking to the others. Only requests still in prefill are kept and walked per step, so the cost per
step is proportional to the requests in prefill, not to the batch: decode-heavy steps stay cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Phase = Literal["prefill", "decode", "mixed"]


@dataclass
class _Prefill:
    first_step_start_s: float
    prompt_len: int
    computed: int | None  # None: re-read from the scheduler output (after a preemption)


def _prompt_len(new_req: Any) -> int:
    ids = getattr(new_req, "prompt_token_ids", None)
    if ids is not None:
        return len(ids)
    embeds = getattr(new_req, "prompt_embeds", None)
    return int(embeds.shape[0]) if embeds is not None else 0


@dataclass(frozen=True)
class StepPlan:
    """What one step does, decided before it runs; ``completing`` get their TTFT at the step's end."""

    phase: Phase | None  # None: nothing scheduled (no forward pass)
    completing: list[float]  # first_step_start_s of requests whose prefill ends in this step


class PrefillTracker:
    def __init__(self) -> None:
        self._prefilling: dict[str, _Prefill] = {}
        self._done: set[str] = set()

    def __len__(self) -> int:
        return len(self._prefilling)

    def plan(self, so: Any, step_start_s: float) -> StepPlan:
        """Account for one SchedulerOutput at the start of the step it describes."""
        for rid in so.finished_req_ids:
            self._prefilling.pop(rid, None)
            self._done.discard(rid)
        preempted = getattr(so, "preempted_req_ids", None)
        if preempted:
            for rid in preempted:
                p = self._prefilling.get(rid)
                if p is not None:
                    p.computed = None
        scheduled: dict[str, int] = so.num_scheduled_tokens
        for new in so.scheduled_new_reqs:
            rid = new.req_id
            if rid in self._done:
                continue
            p = self._prefilling.get(rid)
            if p is None:
                self._prefilling[rid] = _Prefill(step_start_s, _prompt_len(new), int(new.num_computed_tokens))
            else:  # resumed as a new request after preemption
                p.computed = int(new.num_computed_tokens)
        if not scheduled:
            return StepPlan(None, [])
        n_prefill = 0
        completing: list[float] = []
        cached = None
        for rid, p in list(self._prefilling.items()):
            n = scheduled.get(rid)
            if n is None:
                continue
            if p.computed is None:
                cached = cached if cached is not None else so.scheduled_cached_reqs
                idx = cached.req_ids.index(rid) if rid in cached.req_ids else -1
                p.computed = int(cached.num_computed_tokens[idx]) if idx >= 0 else 0
            n_prefill += 1
            p.computed += n
            if p.computed >= p.prompt_len:
                completing.append(p.first_step_start_s)
                del self._prefilling[rid]
                self._done.add(rid)
        if n_prefill == 0:
            phase: Phase = "decode"
        elif n_prefill == len(scheduled):
            phase = "prefill"
        else:
            phase = "mixed"
        return StepPlan(phase, completing)
