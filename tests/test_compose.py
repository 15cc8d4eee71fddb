"""docker/compose.yml is a valid Compose file for server mode, checked by `docker compose
config` itself (no Docker engine needed): the services server mode needs, pinned images,
healthchecks, the ClickHouse config mounts, and several API processes beside one publisher."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from xml.etree import ElementTree

import pytest

from publish.dbt import dbt_environment
from toplist.config import Config

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
# Where docker/ensure-compose.sh (run by `make test`) builds the plugin when docker lacks it.
BUILT = ROOT / ".toplist" / "docker"


def _compose_env() -> dict[str, str]:
    env = dict(os.environ)
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode != 0:
        assert (BUILT / "cli-plugins" / "docker-compose").exists(), (
            "docker compose is missing: `make test` builds it (docker/ensure-compose.sh)"
        )
        env["DOCKER_CONFIG"] = str(BUILT)
    return env


def compose_config(name: str) -> dict:
    if shutil.which("docker") is None:
        pytest.skip("no docker client on this machine (the compose files need one to validate)")
    run = subprocess.run(
        [
            "docker",
            "compose",
            "-f",
            str(DOCKER / name),
            "--profile",
            "*",
            "config",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        env=_compose_env(),
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, f"docker compose config rejected {name}:\n{run.stderr}"
    return json.loads(run.stdout)


def test_the_server_mode_compose_file_is_valid_and_complete(monkeypatch):
    config = compose_config("compose.yml")
    services = config["services"]
    assert set(services) == {
        "clickhouse", "kafka", "migrate", "scheduler", "api", "toplist", "prometheus", "grafana",
    }  # fmt: skip
    for name, service in services.items():
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: {image} is not pinned"
    for name in ("clickhouse", "kafka", "api"):
        assert services[name]["healthcheck"]["test"], f"{name} has no healthcheck"
    mounts = {
        v["target"]: Path(v["source"])
        for v in services["clickhouse"]["volumes"]
        if v["type"] == "bind"
    }
    for target in ("/etc/clickhouse-server/config.d", "/etc/clickhouse-server/users.d"):
        assert mounts[target].is_dir() and any(mounts[target].glob("*.xml")), target
    # One publisher and several API processes, after the migrations, on the server's URL.
    assert services["scheduler"]["command"] == ["schedule"]
    assert services["api"]["deploy"]["replicas"] >= 2
    for name in ("scheduler", "api"):
        assert services[name]["depends_on"]["migrate"]["condition"] == (
            "service_completed_successfully"
        )
        env = services[name]["environment"]
        assert env["TOPLIST_CLICKHOUSE_URL"].startswith("http://")
        assert env["TOPLIST_KAFKA_BROKERS"] == "kafka:9092"
    # An analyst's `toplist dbt build` reaches the same server, as the same user.
    url = services["toplist"]["environment"]["TOPLIST_CLICKHOUSE_URL"]
    monkeypatch.delenv("TOPLIST_DBT_TARGET", raising=False)  # as in the container
    dbt = dbt_environment(Config(clickhouse_url=url))
    assert (dbt["TOPLIST_DBT_TARGET"], dbt["TOPLIST_CLICKHOUSE_HOST"]) == ("server", "clickhouse")
    assert (dbt["TOPLIST_CLICKHOUSE_USER"], dbt["TOPLIST_CLICKHOUSE_PASSWORD"]) == (
        "toplist",
        "toplist",
    )
    assert services["migrate"]["depends_on"]["clickhouse"]["condition"] == "service_healthy"
    # Prometheus and Grafana, provisioned from docker/prometheus and docker/grafana.
    for name, target in (
        ("prometheus", "/etc/prometheus"),
        ("grafana", "/etc/grafana/provisioning"),
        ("grafana", "/var/lib/grafana/dashboards"),
    ):
        (source,) = [v["source"] for v in services[name]["volumes"] if v["target"] == target]
        assert Path(source).is_dir() and any(Path(source).iterdir()), (name, target)
    assert (
        "grafana-clickhouse-datasource" in services["grafana"]["environment"]["GF_INSTALL_PLUGINS"]
    )


def test_the_cluster_compose_file_is_two_shards_of_two_replicas_with_keeper():
    config = compose_config("compose.cluster.yml")
    services = config["services"]
    nodes = {name: s for name, s in services.items() if name.startswith("ch-")}
    keepers = {name: s for name, s in services.items() if name.startswith("keeper-")}
    assert len(keepers) == 3, "a Keeper quorum that survives one node down"
    macros = sorted(
        (s["environment"]["TOPLIST_SHARD"], s["environment"]["TOPLIST_REPLICA"])
        for s in nodes.values()
    )
    assert macros == [("1", "ch-s1r1"), ("1", "ch-s1r2"), ("2", "ch-s2r1"), ("2", "ch-s2r2")]
    for name, service in services.items():
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: {image} is not pinned"
    for name in [*nodes, *keepers, "kafka", "api"]:
        assert services[name]["healthcheck"]["test"], f"{name} has no healthcheck"
    for name, service in nodes.items():
        assert service["hostname"] == service["environment"]["TOPLIST_REPLICA"], name
        mounts = {v["target"]: Path(v["source"]) for v in service["volumes"] if v["type"] == "bind"}
        assert set(mounts) == {
            "/etc/clickhouse-server/config.d/toplist.xml",
            "/etc/clickhouse-server/config.d/cluster.xml",
            "/etc/clickhouse-server/users.d/toplist.xml",
            "/etc/clickhouse-server/users.d/cluster.xml",
        }, name
        assert all(source.is_file() for source in mounts.values()), name
        assert {"keeper-1", "keeper-2", "keeper-3"} <= set(service["depends_on"]), name
    # The cluster's servers in cluster.xml are exactly the compose file's nodes.
    cluster = ElementTree.parse(DOCKER / "clickhouse" / "cluster" / "cluster.xml").getroot()
    shards = cluster.findall("remote_servers/toplist/shard")
    assert [[r.findtext("host") for r in shard.findall("replica")] for shard in shards] == [
        ["ch-s1r1", "ch-s1r2"],
        ["ch-s2r1", "ch-s2r2"],
    ]
    assert all(shard.findtext("internal_replication") == "true" for shard in shards)
    assert [n.findtext("host") for n in cluster.findall("zookeeper/node")] == sorted(keepers)
    for name in ("migrate", "scheduler", "api", "toplist"):
        env = services[name]["environment"]
        assert env["TOPLIST_CLICKHOUSE_CLUSTER"] == "toplist", name
        host = env["TOPLIST_CLICKHOUSE_URL"].rsplit("@", 1)[1].split(":")[0]
        assert host in nodes, f"{name} talks to {host}, not a node of the cluster"
    assert set(services["migrate"]["depends_on"]) >= set(nodes), "ON CLUSTER waits for every node"
    assert services["scheduler"]["command"] == ["schedule"]
    assert services["api"]["deploy"]["replicas"] >= 2


def test_every_clickhouse_config_file_is_well_formed_xml():
    files = sorted((DOCKER / "clickhouse").rglob("*.xml"))
    assert len(files) >= 5
    for path in files:
        assert ElementTree.parse(path).getroot().tag == "clickhouse", path
