"""Run the kernel tests through Triton's CPU interpreter when there is no GPU.

triton.jit picks compiler or interpreter when a kernel is decorated, from TRITON_INTERPRET, so the
variable is set here, before moe_opt.kernels (and Triton's own library functions) are imported, and
then restored: tests collected later (e.g. vLLM plugin tests that inspect vLLM's Triton kernels)
must still see compiled-mode kernels.
"""

import os
import sys

import pytest
import torch

_TRITON_IMPORTED_TOO_EARLY = False
if not torch.cuda.is_available():
    _TRITON_IMPORTED_TOO_EARLY = "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1"
    _previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    import moe_opt.kernels  # noqa: F401,E402 - decorate every kernel in interpreter mode
    import moe_opt.kernels.testing  # noqa: F401,E402

    if _previous is None:
        del os.environ["TRITON_INTERPRET"]
    else:
        os.environ["TRITON_INTERPRET"] = _previous


def pytest_collection_modifyitems(config, items):
    if not _TRITON_IMPORTED_TOO_EARLY:
        return
    skip = pytest.mark.skip(
        reason="no GPU and Triton was imported before tests/kernels could select its CPU interpreter; "
        "run `pytest tests/kernels` on its own"
    )
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _interpreter_while_testing(monkeypatch):
    """Triton also reads TRITON_INTERPRET lazily at launch (e.g. its first gluon import), so keep it
    set for the duration of each kernel test, and only then."""
    if not torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "1")
