"""Run blocking calls side by side in daemon threads without losing Ctrl-C."""

from __future__ import annotations

import threading
from collections.abc import Callable

JOIN_POLL_S = 0.5
"""Joins are this short because a main thread blocked in an endless join never sees KeyboardInterrupt."""


def run_in_threads(calls: list[Callable[[], object]]) -> None:
    """Start every call in a daemon thread and wait for all (what a call returns is dropped); a Ctrl-C leaves them
    to die with the process."""
    threads = [threading.Thread(target=call, daemon=True) for call in calls]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(timeout=JOIN_POLL_S)
