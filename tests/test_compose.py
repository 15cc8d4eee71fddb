"""docker/compose.yml is a valid Compose file for server mode, checked by `docker compose
config` itself (no Docker engine needed): the services server mode needs, pinned images,
healthchecks, the ClickHouse config mounts, and several API processes beside one publisher."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

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


def test_the_server_mode_compose_file_is_valid_and_complete():
    config = compose_config("compose.yml")
    services = config["services"]
    assert set(services) == {"clickhouse", "kafka", "migrate", "scheduler", "api", "toplist"}
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
    assert services["toplist"]["environment"]["TOPLIST_DBT_TARGET"] == "server"
    assert services["migrate"]["depends_on"]["clickhouse"]["condition"] == "service_healthy"
