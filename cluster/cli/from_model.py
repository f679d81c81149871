"""Command-line options generated from the config model, so the CLI can never drift from the YAML.

Every scalar field becomes ``--section.field VALUE`` with the field's description as help; values
are read as YAML scalars ("null", "true", "2.5") and validated by the model like the file is.
Anything else (lists, trace kinds) is reachable with ``--set dotted.path=YAML``.
"""

from __future__ import annotations

import argparse
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel

from experiment.config import ConfigError

SCALARS = (int, float, str, bool, Path)


def _is_scalar(annotation: Any) -> bool:
    origin = get_origin(annotation)
    if origin is Literal:
        return True
    if origin in (Union, types.UnionType):
        return all(_is_scalar(a) for a in get_args(annotation) if a is not type(None))
    return annotation in SCALARS


def scalar_fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, FieldInfo) for every scalar leaf, recursing into nested models."""
    out: list[tuple[str, Any]] = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += scalar_fields(ann, path + ".")
        elif _is_scalar(ann):
            out.append((path, field))
    return out


def add_model_options(parser: argparse.ArgumentParser, model: type[BaseModel]) -> None:
    group = parser.add_argument_group("experiment fields (override the file)")
    for path, field in scalar_fields(model):
        choices = get_args(field.annotation) if get_origin(field.annotation) is Literal else None
        default = field.get_default(call_default_factory=True)
        help_text = (field.description or "") + f" [default: {default}]"
        if choices:
            help_text += f" {{{', '.join(map(str, choices))}}}"
        group.add_argument(f"--{path}", dest=f"override:{path}", metavar="VALUE", help=help_text.replace("%", "%%"))
    group.add_argument(
        "--set",
        dest="override_set",
        action="append",
        default=[],
        metavar="PATH=YAML",
        help="Set any field, e.g. --set 'workload.trace={kind: synthetic, num_requests: 4, "
        "input_tokens: 8, output_tokens: 4, rate_rps: 2}'",
    )


def _yaml_value(option: str, key: str, text: str) -> Any:
    """One override's value, read as YAML; malformed YAML is bad input naming the option and the key."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        mark = getattr(e, "problem_mark", None)
        where = f" (column {mark.column + 1})" if mark is not None else ""
        raise ConfigError(f"{option} {key}: not valid YAML{where}: {problem}: {text!r}") from None


def collect_overrides(ns: argparse.Namespace) -> dict[str, Any]:
    """Every ``--section.field VALUE`` and ``--set PATH=YAML`` as {dotted path: value}.

    Raises ``ConfigError`` (exit 2, before anything starts) for a value that is not YAML or a ``--set``
    without a path, naming the key, like a bad field in the file.
    """
    overrides: dict[str, Any] = {}
    for key, value in vars(ns).items():
        if key.startswith("override:") and value is not None:
            path = key.split(":", 1)[1]
            overrides[path] = _yaml_value(f"--{path}", path, value)
    for item in ns.override_set:
        k, sep, v = item.partition("=")
        path = k.strip()
        if not sep or not path or any(not part for part in path.split(".")):
            raise ConfigError(f"--set expects PATH=YAML (a dotted path such as engine.env), got {item!r}")
        overrides[path] = _yaml_value("--set", path, v)
    return overrides


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    for dotted, value in overrides.items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            child = node.get(p)
            if not isinstance(child, dict):
                child = {}
                node[p] = child
            node = child
        node[leaf] = value
    return data


__all__ = ["add_model_options", "collect_overrides", "apply_overrides", "scalar_fields", "typing"]
