from pathlib import Path

import pytest

from experiment.schemas import SCHEMAS, render

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_committed_schema_matches_the_model(name):
    assert (DOCS / name).read_text() == render(name), "regenerate with: moeperf schema --out docs"
