"""A pytest plugin for ``test_boundaries``: says after collection whether anything collected imported Triton."""

import sys


def pytest_collection_finish(session):
    print(f"triton imported: {'triton' in sys.modules}")
