"""The run's API key: random per run unless the user names a variable holding theirs; an unset one is a config
error before anything starts; the client sends it as a bearer token and never shows it."""

import pytest

from cluster.engine.api_key import auth_headers, run_api_key
from experiment.config import ConfigError, EngineSpec
from workloads.client import ClientSettings


def test_without_api_key_env_every_run_gets_its_own_random_key():
    keys = {run_api_key(EngineSpec(), environ={}) for _ in range(20)}
    assert len(keys) == 20 and all(len(k) >= 40 for k in keys)


def test_api_key_env_reads_the_users_key_and_an_unset_or_empty_one_is_a_config_error():
    spec = EngineSpec(api_key_env="MY_KEY")
    assert run_api_key(spec, environ={"MY_KEY": "s3cret"}) == "s3cret"
    for environ in ({}, {"MY_KEY": ""}):
        with pytest.raises(ConfigError, match="engine.api_key_env: environment variable 'MY_KEY'"):
            run_api_key(spec, environ=environ)


def test_the_key_is_a_bearer_header_and_never_in_the_settings_repr():
    assert auth_headers("k1") == {"Authorization": "Bearer k1"} and auth_headers(None) == {}
    s = ClientSettings(base_url="http://127.0.0.1:1", model="m", arm="a", vocab_lo=0, vocab_hi=9, api_key="k1-xyz")
    assert "k1-xyz" not in repr(s) and "k1-xyz" not in str(s)
