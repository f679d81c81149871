"""Progress as the reader's output can show it: plain lines off a terminal, bars on one, nothing when quiet."""

import io
import logging

import pytest

from cluster.cli.log_setup import LOGGERS, setup_logging
from cluster.orchestration.progress import BarProgress, LineProgress, Progress, make_progress


@pytest.fixture(autouse=True)
def restore_loggers():
    saved = {name: (log.handlers[:], log.level, log.propagate) for name in LOGGERS for log in [logging.getLogger(name)]}
    yield
    for name, (handlers, level, propagate) in saved.items():
        log = logging.getLogger(name)
        log.handlers[:] = handlers
        log.setLevel(level)
        log.propagate = propagate


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_progress_is_a_plain_line_every_interval_and_one_at_the_end():
    out = io.StringIO()
    setup_logging(logging.INFO, stream=out)
    clock = FakeClock()
    progress = make_progress(rounds=1, stream=out, clock=clock, interval_s=5.0)
    assert isinstance(progress, LineProgress)
    progress.begin("baseline", 0, total=12)
    for i in range(12):
        clock.now_s += 1.0
        progress.advance("baseline", 1, errors=1 if i == 7 else 0)
    progress.end("baseline")
    text = out.getvalue()
    assert "\r" not in text
    assert text.splitlines() == [
        "arm baseline: round 0: 5/12 requests done, 0 errors",
        "arm baseline: round 0: 10/12 requests done, 1 errors",
        "arm baseline: round 0: 12/12 requests done, 1 errors",
    ]


def test_arms_in_parallel_get_their_own_lines_and_late_records_after_the_end_are_ignored():
    out = io.StringIO()
    setup_logging(logging.INFO, stream=out)
    clock = FakeClock()
    progress = make_progress(rounds=2, stream=out, clock=clock, interval_s=5.0)
    progress.begin("a", 1, total=4)
    progress.begin("b", 1, total=4, position=1)
    clock.now_s = 6.0
    progress.advance("a", 2, errors=0)
    progress.close()  # Ctrl-C: the run ends what is still open
    progress.advance("b", 1, errors=0)  # a consumer thread still delivering after that
    assert out.getvalue().splitlines() == [
        "arm a: round 1: 2/4 requests done, 0 errors",
        "arm a: round 1: 2/4 requests done, 0 errors",
        "arm b: round 1: 0/4 requests done, 0 errors",
    ]


def test_on_a_terminal_progress_is_a_bar_redrawn_in_place():
    term = Terminal()
    setup_logging(logging.INFO, stream=io.StringIO())
    progress = make_progress(rounds=2, stream=term)
    assert isinstance(progress, BarProgress)
    progress.begin("baseline", 1, total=3)
    progress.advance("baseline", 3, errors=0)
    progress.end("baseline")
    text = term.getvalue()
    assert "\r" in text and "baseline r1" in text and "3/3" in text


def test_quiet_shows_no_progress_and_only_warnings_prefixed_with_their_level():
    out = io.StringIO()
    setup_logging(logging.WARNING, stream=out)
    progress = make_progress(rounds=1, stream=Terminal())
    assert type(progress) is Progress
    logging.getLogger("cluster.orchestration.driver").info("arm a: engine healthy")
    logging.getLogger("workloads.client").warning("engine unreachable")
    assert out.getvalue() == "warning: engine unreachable\n"


def test_setup_twice_replaces_its_handler_instead_of_doubling_lines():
    first, second = io.StringIO(), io.StringIO()
    setup_logging(logging.DEBUG, stream=first)
    setup_logging(logging.INFO, stream=second)
    log = logging.getLogger("cluster.orchestration.arm_runner")
    log.debug("hidden at INFO")
    log.info("shown once")
    assert first.getvalue() == "" and second.getvalue() == "shown once\n"
