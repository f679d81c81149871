"""How far each arm's replay has got, in the form the reader's output can show.

On a terminal that is a tqdm bar per arm, redrawn in place. Anywhere else (``ray job logs``, CI,
a file) redraws are a stream of carriage returns that nobody can read, so progress becomes a
plain log line per arm every few seconds, and one when the arm's round ends. Updates come from
the driver's record-consumer threads, never from the client's sending loop.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from tqdm import tqdm

logger = logging.getLogger(__name__)

LINE_INTERVAL_S = 5.0


class Progress:
    """The interface, and what a quiet run gets: every method does nothing."""

    def begin(self, arm: str, round_index: int, total: int, position: int = 0) -> None:
        """A round of ``arm`` starts with ``total`` planned requests (``position``: its row on screen)."""

    def advance(self, arm: str, done: int, errors: int) -> None:
        """``done`` more records of ``arm`` are in, ``errors`` of them failed or never sent."""

    def end(self, arm: str) -> None:
        """The round of ``arm`` is over (finished, failed or interrupted)."""

    def close(self) -> None:
        """The run is over: end whatever is still open."""


class BarProgress(Progress):
    """A tqdm bar per arm, as a terminal shows it."""

    def __init__(self, rounds: int, stream: IO[str]) -> None:
        self._rounds, self._stream = rounds, stream
        self._bars: dict[str, tqdm] = {}
        self._lock = threading.Lock()

    def begin(self, arm: str, round_index: int, total: int, position: int = 0) -> None:
        label = arm if self._rounds == 1 else f"{arm} r{round_index}"
        bar = tqdm(
            total=total, desc=f"{label:>20}", unit="req", position=position, dynamic_ncols=True, file=self._stream
        )
        with self._lock:
            self._bars[arm] = bar

    def advance(self, arm: str, done: int, errors: int) -> None:
        with self._lock:
            bar = self._bars.get(arm)  # None: records still arriving after Ctrl-C ended the round
            if bar is not None:
                bar.update(done)

    def end(self, arm: str) -> None:
        with self._lock:
            bar = self._bars.pop(arm, None)
        if bar is not None:
            bar.close()

    def close(self) -> None:
        for arm in list(self._bars):
            self.end(arm)


@dataclass
class _ArmCount:
    round_index: int
    total: int
    done: int = 0
    errors: int = 0
    last_line_s: float = 0.0


class LineProgress(Progress):
    """A plain log line per arm at most every ``interval_s`` while records come in, and one at the end."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, interval_s: float = LINE_INTERVAL_S) -> None:
        self._clock, self._interval_s = clock, interval_s
        self._arms: dict[str, _ArmCount] = {}
        self._lock = threading.Lock()

    def begin(self, arm: str, round_index: int, total: int, position: int = 0) -> None:
        with self._lock:
            self._arms[arm] = _ArmCount(round_index, total, last_line_s=self._clock())

    def advance(self, arm: str, done: int, errors: int) -> None:
        with self._lock:
            count = self._arms.get(arm)  # None: records still arriving after Ctrl-C ended the round
            if count is None:
                return
            count.done += done
            count.errors += errors
            now = self._clock()
            if now - count.last_line_s < self._interval_s:
                return
            count.last_line_s = now
            line = _line(arm, count)
        logger.info(line)

    def end(self, arm: str) -> None:
        with self._lock:
            count = self._arms.pop(arm, None)
        if count is not None:
            logger.info(_line(arm, count))

    def close(self) -> None:
        for arm in list(self._arms):
            self.end(arm)


def _line(arm: str, c: _ArmCount) -> str:
    return f"arm {arm}: round {c.round_index}: {c.done}/{c.total} requests done, {c.errors} errors"


def make_progress(
    rounds: int,
    stream: IO[str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    interval_s: float = LINE_INTERVAL_S,
) -> Progress:
    """Bars when ``stream`` (default: stderr, where tqdm draws) is a terminal, else lines; none when quiet."""
    if not logger.isEnabledFor(logging.INFO):
        return Progress()
    stream = sys.stderr if stream is None else stream
    if stream.isatty():
        return BarProgress(rounds, stream)
    return LineProgress(clock, interval_s)
