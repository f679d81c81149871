"""The calibration benchmark writes a complete, commit-ready JSON (tiny trial counts: not the numbers)."""

import json

from bench.calibration_aa import FALSE_FLAG_DESIGNS, POWER_DESIGNS, main


def test_writes_command_versions_parameters_and_every_design(tmp_path):
    out = tmp_path / "cal.json"
    args = ["--out", str(out), "--trials", "3", "--power-trials", "2", "--sensitivity-trials", "2", "--jobs", "1"]
    assert main(args) == 0
    data = json.loads(out.read_text())
    assert data["command"].startswith("python -m bench.calibration_aa --out")
    assert {"numpy", "scipy", "python"} <= set(data["versions"]) and data["date"]
    assert data["parameters"]["noise_model"]["engine_latency_sd"] == 0.013
    assert [f["design"] for f in data["false_flag_rate"]] == list(FALSE_FLAG_DESIGNS)
    assert {p["design"] for p in data["power"]} == set(POWER_DESIGNS)
    today = data["false_flag_rate"][0]
    assert today["design"] == "1r" and today["false_flag"]["hits"] == 0
    assert today["old_rule_false_flag"] is not None and data["false_flag_rate"][2]["old_rule_false_flag"] is None
