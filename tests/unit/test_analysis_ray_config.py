"""ray_config.yaml is checked against the schema Ray itself ships and Ray's own config validator."""

import json
from pathlib import Path

import jsonschema
import pytest
import ray
import yaml

REPO = Path(__file__).resolve().parents[2]
SCHEMA = Path(ray.__file__).parent / "autoscaler" / "ray-schema.json"


@pytest.fixture(scope="module")
def config():
    return yaml.safe_load((REPO / "ray_config.yaml").read_text())


def test_valid_against_rays_shipped_schema(config):
    jsonschema.validate(config, json.loads(SCHEMA.read_text()))


def test_valid_for_rays_launcher_after_defaults(config):
    from ray.autoscaler._private.util import fillout_defaults, validate_config

    validate_config(fillout_defaults(config))


def test_cpu_head_and_an_eight_h200_worker_type(config):
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0
    gpu = [t for name, t in types.items() if name != config["head_node_type"]]
    assert len(gpu) == 1
    worker = gpu[0]
    assert worker["resources"]["GPU"] == 8
    assert worker["resources"]["accelerator_type:H200"] == 1
    assert worker["node_config"]["InstanceType"].startswith("p5e.")
    assert worker["min_workers"] >= 1 and worker["max_workers"] <= config["max_workers"]


def test_nodes_install_moeperf_with_the_gpu_extra(config):
    commands = " ".join(config["setup_commands"])
    assert "pip install" in commands and "-e '.[gpu]'" in commands
    assert "." in config["file_mounts"].values()
