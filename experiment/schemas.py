"""JSON Schemas generated from the models; committed under docs/ and pinned by a test."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from experiment.config import ExperimentConfig
from result_format.run_result import RunResult

SCHEMAS: dict[str, type[BaseModel]] = {"result.schema.json": RunResult, "experiment.schema.json": ExperimentConfig}


def render(name: str) -> str:
    return json.dumps(SCHEMAS[name].model_json_schema(), indent=2, sort_keys=True) + "\n"


def write_schemas(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in SCHEMAS:
        p = out_dir / name
        p.write_text(render(name))
        paths.append(p)
    return paths
