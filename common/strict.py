"""The strict pydantic base of every config, result and analysis model.

A typo in a YAML key or a stale field in a result file must be an error naming the field, never a
silently ignored value, so every model forbids extra keys.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FrozenStrictModel(BaseModel):
    """For values that are hashed or shared (flags, SLOs): strict and immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)
