"""The API key of a run: every engine moeperf starts requires it, every request moeperf sends carries it.

vLLM's OpenAI server checks ``Authorization: Bearer <key>`` on its ``/v1`` routes when started with one;
moeperf hands it over as ``VLLM_API_KEY`` in the server's environment at spawn (never on the command line,
which ``ps`` shows and the result records, nor in the recorded environment). Without ``engine.api_key_env``
each run makes its own random key (``secrets``), which lives only in the driver's memory and the Ray calls
that start engines and clients: a port left reachable on the cluster network serves no one else. With it,
the key is the user's, for engines or endpoints that already require one. The engine's worker processes drop it
from their environment before vLLM compiles (``moe_opt/plugin/credentials.py``): vLLM 0.26 hashes it into its
compile cache key and writes it to disk there.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping

from experiment.config import ConfigError, EngineSpec
from moe_opt.plugin.credentials import API_KEY_ENV_VAR  # where the plugin takes it out of the workers' environment
from workloads.http1 import auth_headers

__all__ = ["API_KEY_ENV_VAR", "auth_headers", "run_api_key", "with_api_key"]

RANDOM_KEY_BYTES = 32


def run_api_key(engine: EngineSpec, environ: Mapping[str, str] = os.environ) -> str:
    """The key for this run; a named variable that is unset or empty is a config error (exit 2, nothing started)."""
    if engine.api_key_env is None:
        return secrets.token_urlsafe(RANDOM_KEY_BYTES)
    key = environ.get(engine.api_key_env, "")
    if not key:
        raise ConfigError(f"engine.api_key_env: environment variable {engine.api_key_env!r} is not set or is empty")
    return key


def with_api_key(base_env: Mapping[str, str], api_key: str | None) -> dict[str, str]:
    """The environment a server is spawned with: ``base_env`` plus the key. Only the spawn sees it; the command
    and environment a result records (``cluster.engine.command.ServerCommand``) never hold it."""
    env = dict(base_env)
    if api_key:
        env[API_KEY_ENV_VAR] = api_key
    return env
