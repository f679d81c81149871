"""Run a command and take its whole process group down if our parent (the EngineActor) dies.

Ray kills actors with SIGKILL, which no handler in the actor can see; a vLLM server left behind
would hold its port, its RAM and (on GPUs) its devices. This tiny wrapper sits between the actor
and vLLM, polls its parent, and kills the group it leads when the parent is gone.

Usage: python -m cluster.engine.orphan_guard -- COMMAND...
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

POLL_S = 1.0
GRACE_S = 10.0


def _term_on_parent_death() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: python -m cluster.engine.orphan_guard -- COMMAND...", file=sys.stderr)
        return 2
    cmd = argv[argv.index("--") + 1 :]
    parent = os.getppid()
    # Ray reaps its workers' direct children (this guard) with SIGKILL; the server must not outlive
    # us then either, so it asks the kernel for SIGTERM when the guard dies (single-threaded here).
    child = subprocess.Popen(cmd, preexec_fn=_term_on_parent_death)
    signal.signal(signal.SIGTERM, lambda *_: None)  # the group signal reaches the child too; wait for it
    while True:
        code = child.poll()
        if code is not None:
            return code
        if os.getppid() != parent:
            child.terminate()
            try:
                return child.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(os.getpgrp(), signal.SIGKILL)
        try:
            child.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
