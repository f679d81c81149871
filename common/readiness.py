"""Waiting for a server we started to answer over HTTP: one poll loop for vLLM and for Prometheus.

A server that dies while starting must be reported at once, with its exit code, rather than after the
whole timeout; one that answers anything but 200 (vLLM's 503 while loading) is not ready yet. Callers
turn the two failures into their own errors, each with the log tail that explains it.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping

PROBE_TIMEOUT_S = 2.0


class ServerExited(RuntimeError):
    def __init__(self, code: int) -> None:
        super().__init__(f"exited with code {code}")
        self.code = code


class ServerNotReady(TimeoutError):
    def __init__(self, timeout_s: float) -> None:
        super().__init__(f"not ready after {timeout_s:.0f} s")
        self.timeout_s = timeout_s


def answers_ok(url: str, timeout_s: float = PROBE_TIMEOUT_S, headers: Mapping[str, str] | None = None) -> bool:
    """One GET: True on HTTP 200; False on any other status, a refused connection or a timeout."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=dict(headers or {})), timeout=timeout_s) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def wait_ready(
    url: str,
    exit_code: Callable[[], int | None],
    timeout_s: float,
    poll_interval_s: float,
    headers: Mapping[str, str] | None = None,
) -> float:
    """Seconds until ``url`` answers 200; ServerExited as soon as ``exit_code()`` is not None, ServerNotReady."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        code = exit_code()
        if code is not None:
            raise ServerExited(code)
        if answers_ok(url, headers=headers):
            return time.monotonic() - t0
        time.sleep(poll_interval_s)  # polling a process we do not control: the only way to learn it is up
    raise ServerNotReady(timeout_s)
