"""``-q``/``-v`` and the one place the harness's loggers get a level and a handler.

The driver reports what it is doing through ``logging`` (module loggers under ``cluster`` and
``workloads``), so a caller using it as a library decides what to see. The command line decides
for the user: INFO by default, rendered as bare messages so the terminal reads as before;
``-q`` keeps only warnings and errors (and drops the progress bar), ``-v`` adds debug detail.
The command's own output (tables, the result path, error messages on stderr) is not logging.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import IO

LOGGERS = ("cluster", "workloads")


class _PlainFormatter(logging.Formatter):
    """INFO as the bare message; other levels prefixed with their name ("warning: ...")."""

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        return message if record.levelno == logging.INFO else f"{record.levelname.lower()}: {message}"


class _HarnessHandler(logging.StreamHandler[IO[str]]):
    """Marks the handler setup_logging installed, so a second call replaces it instead of doubling lines."""


def add_verbosity_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "-q", "--quiet", dest="log_level", action="store_const", const=logging.WARNING, help="Warnings and errors only."
    )
    group.add_argument(
        "-v", "--verbose", dest="log_level", action="store_const", const=logging.DEBUG, help="Debug detail too."
    )
    parser.set_defaults(log_level=logging.INFO)


def setup_logging(level: int = logging.INFO, stream: IO[str] | None = None) -> None:
    """Route the ``cluster`` and ``workloads`` loggers at ``level`` to ``stream`` (default: stdout)."""
    handler = _HarnessHandler(sys.stdout if stream is None else stream)
    handler.setFormatter(_PlainFormatter("%(message)s"))
    for name in LOGGERS:
        log = logging.getLogger(name)
        for old in [h for h in log.handlers if isinstance(h, _HarnessHandler)]:
            log.removeHandler(old)
        log.addHandler(handler)
        log.setLevel(level)
        log.propagate = False  # a root handler (Ray's, a notebook's) would print every line twice
