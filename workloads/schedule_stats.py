"""What ``moeperf validate`` says of a planned schedule, from its columns: a week-long trace is described in
the memory of its numbers, never as one object per request."""

from __future__ import annotations

import numpy as np

from workloads.workload import Schedule


def schedule_line(schedule: Schedule) -> str:
    """Size, span, lengths, chains, and everything clipped or skipped: what a user checks before a long run."""
    cols = schedule.requests
    p_in, p_out = (np.percentile(c, (50, 99)) for c in (cols.prompt_tokens, cols.max_tokens))
    text = (
        f"{len(cols)} requests over {schedule.duration_s:.1f} s, prompt p50/p99 {p_in[0]:g}/{p_in[1]:g} tokens, "
        f"output p50/p99 {p_out[0]:g}/{p_out[1]:g} tokens"
    )
    if chained := int((cols.after_index >= 0).sum()):
        text += f", {chained} chained"
    clipped = {"prompt": schedule.clipped_input, "output": schedule.clipped_output, "context": schedule.clipped_context}
    if any(clipped.values()):
        text += ", clipped " + ", ".join(f"{n} {what}" for what, n in clipped.items() if n)
    if schedule.skipped:
        text += ", skipped " + ", ".join(f"{n} {why}" for why, n in schedule.skipped.items())
    return text
