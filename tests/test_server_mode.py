"""Server mode's seams that need no server: the suite's switch to a server URL, dbt's profile
for a server and a cluster, and the connection settings dbt gets from Toplist's URL.

(This machine has no ClickHouse server; with one, `TOPLIST_CLICKHOUSE_URL=http://... make test`
runs the whole suite against it.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from publish.dbt import dbt_environment
from toplist.config import PROJECT_ROOT, Config


def test_given_a_server_url_the_suite_skips_only_the_embedded_only_tests(tmp_path):
    env = {**os.environ, "TOPLIST_CLICKHOUSE_URL": "http://127.0.0.1:9"}
    env.pop("TOPLIST_TEST_CLICKHOUSE_URL", None)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs"]
        + ["tests/test_kafka_engine_ddl.py", "-k", "embedded_mode or unknown_placeholder"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed, 1 skipped" in run.stdout, run.stdout
    assert "needs the embedded engine" in run.stdout


def test_dbt_reaches_the_server_of_toplists_url():
    config = Config(clickhouse_url="https://analyst:s%40cret@ch.example:8443", database="x")
    env = dbt_environment(config)
    assert env["TOPLIST_DBT_TARGET"] == os.environ.get("TOPLIST_DBT_TARGET", "server")
    assert (
        env["TOPLIST_CLICKHOUSE_HOST"],
        env["TOPLIST_CLICKHOUSE_PORT"],
        env["TOPLIST_CLICKHOUSE_USER"],
        env["TOPLIST_CLICKHOUSE_PASSWORD"],
        env["TOPLIST_CLICKHOUSE_SECURE"],
    ) == ("ch.example", "8443", "analyst", "s@cret", "True")
    plain = dbt_environment(Config(clickhouse_url="http://clickhouse", database="x"))
    assert (plain["TOPLIST_CLICKHOUSE_PORT"], plain["TOPLIST_CLICKHOUSE_SECURE"]) == (
        "8123",
        "False",
    )


def _models_on_the_server_profile(tmp_path: Path, cluster: str) -> dict[str, dict]:
    """`dbt ls` with the server target (it parses the project and renders the profile, and
    connects to nothing): each table model's config."""
    env = {
        **os.environ,
        "TOPLIST_DBT_TARGET": "server",
        "TOPLIST_CLICKHOUSE_CLUSTER": cluster,
        "DBT_TARGET_PATH": str(tmp_path / "target"),
        "DBT_LOG_PATH": str(tmp_path / "logs"),
    }
    run = subprocess.run(
        [sys.executable, "-c", "from dbt.cli.main import cli; cli()", "ls", "-q"]
        + ["--resource-type", "model", "--output", "json", "--output-keys", "name", "config"]
        + ["--project-dir", str(PROJECT_ROOT), "--profiles-dir", str(PROJECT_ROOT / "dbt_project")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, f"the server profile does not render:\n{run.stdout}{run.stderr}"
    models = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    return {m["name"]: m["config"] for m in models if m["config"]["materialized"] == "table"}


def test_dbt_models_are_replicated_tables_on_a_cluster_and_plain_ones_on_a_server(tmp_path):
    single = _models_on_the_server_profile(tmp_path, "")
    cluster = _models_on_the_server_profile(tmp_path, "toplist")
    assert {"chart_rankings", "sale_rankings", "popular_rankings"} <= set(single)
    assert set(single) == set(cluster)
    for name in single:
        assert single[name]["engine"] == "MergeTree()", name
        assert cluster[name]["engine"] == (
            "ReplicatedMergeTree('/clickhouse/tables/{uuid}/all', '{replica}')"
        ), name
