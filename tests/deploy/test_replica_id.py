"""SITS_REPLICA_ID: the pod name from the downward API names the replica (docs/replication.md)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sits.app import Gateway
from sits.control.cluster_config import ClusterConfig
from sits.configuration.gateway import parse_config
from sits.errors import ConfigError
from sits.settings import Settings


def test_the_environment_names_the_replica_and_wins_over_the_config(tmp_path):
    settings = Settings.from_env({"SITS_REPLICA_ID": "sits-7c9d8f6b5-x2x4q", "SITS_DATA_DIR": str(tmp_path)})
    config = parse_config({"cluster": {"replica_id": "from-config"},
                           "models": [{"name": "m", "endpoints": [{"url": "http://127.0.0.1:9/v1"}]}]})
    assert Gateway(settings, config).cluster.replica.id == "sits-7c9d8f6b5-x2x4q"
    assert Gateway(Settings(data_dir=tmp_path), config).cluster.replica.id == "from-config"
    # --workers N: each process is a replica of its own, under the pod's name
    worker = settings.with_overrides(worker_index=1)
    assert Gateway(worker, config).cluster.replica.id == "sits-7c9d8f6b5-x2x4q#w1"


@pytest.mark.parametrize("bad", ["-leading-dash", "has space", "x" * 129])
def test_a_malformed_replica_id_stops_startup_naming_the_variable(bad):
    with pytest.raises(ConfigError, match="SITS_REPLICA_ID"):
        Settings.from_env({"SITS_REPLICA_ID": bad})


@pytest.mark.parametrize("name", ["sits-7c9d8f6b5-x2x4q", "gw-eu-1", "a", "host:8080", "r@x.y", "-x", "a b", "a/b",
                                  "x" * 128, "x" * 129, "é"])
def test_the_environment_accepts_exactly_the_ids_the_config_accepts(name):
    try:
        ClusterConfig(replica_id=name)
        by_config = True
    except ValidationError:
        by_config = False
    try:
        Settings.from_env({"SITS_REPLICA_ID": name})
        by_env = True
    except ConfigError:
        by_env = False
    assert by_env == by_config
