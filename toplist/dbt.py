"""Running dbt in-process, with dbt-clickhouse routed to the embedded chDB engine.

dbt-clickhouse builds its clickhouse-connect client for HTTP. The embedded profile target
names the host `chdb`; for that host the client is built from TOPLIST_CLICKHOUSE_URL
(`chdb:///dir`) instead, in this process, so dbt shares the engine that the rest of Toplist
uses (chDB allows one data directory per process). That one override is the whole seam.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import clickhouse_connect

from toplist.config import Config

log = logging.getLogger(__name__)

CHDB_HOST = "chdb"


class DbtError(RuntimeError):
    """A dbt invocation failed; the message says which nodes and why."""


def _route_embedded_host_to_chdb() -> None:
    from dbt.adapters.clickhouse.httpclient import ChHttpClient

    if getattr(ChHttpClient, "_toplist_routed", False):
        return
    create_http_client = ChHttpClient._create_client

    def create_client(self: Any, credentials: Any) -> Any:
        if credentials.host != CHDB_HOST:
            return create_http_client(self, credentials)
        url = os.environ.get("TOPLIST_CLICKHOUSE_URL", "")
        if not url.startswith("chdb:"):
            raise DbtError(
                "the dbt target 'embedded' needs TOPLIST_CLICKHOUSE_URL=chdb:///path;"
                f" got {url!r}. Use the 'server' target for a ClickHouse server."
            )
        return clickhouse_connect.get_client(dsn=url, settings=self._conn_settings)

    ChHttpClient._create_client = create_client
    ChHttpClient._toplist_routed = True


def dbt_environment(config: Config) -> dict[str, str]:
    """The variables the profiles read, for this configuration."""
    return {
        "TOPLIST_CLICKHOUSE_URL": config.clickhouse_url,
        "TOPLIST_DATABASE": config.database,
        "TOPLIST_DBT_TARGET": os.environ.get(
            "TOPLIST_DBT_TARGET", "embedded" if config.embedded else "server"
        ),
    }


def invoke(config: Config, args: Sequence[str], *, quiet: bool = False) -> Any:
    """Run one dbt command (for example ["build"]) in this process; raise DbtError on failure.

    Returns dbt's result object (`dbtRunnerResult.result`).
    """
    from dbt.cli.main import dbtRunner

    _route_embedded_host_to_chdb()
    os.environ.update(dbt_environment(config))
    full_args = [
        *args,
        "--project-dir",
        str(config.dbt_project_dir),
        "--profiles-dir",
        str(config.dbt_profiles_dir),
    ]
    if quiet:
        full_args = ["--quiet", "--log-level-file", "warn", *full_args]
    log.debug("dbt %s", " ".join(full_args))
    outcome = dbtRunner().invoke(full_args)
    if not outcome.success:
        raise DbtError(_describe_failure(args, outcome))
    return outcome.result


def _describe_failure(args: Sequence[str], outcome: Any) -> str:
    if outcome.exception is not None:
        return f"dbt {' '.join(args)} failed: {outcome.exception}"
    failures = []
    for node_result in getattr(outcome.result, "results", None) or []:
        if str(node_result.status) not in ("success", "pass", "skipped"):
            node = node_result.node.unique_id
            failures.append(f"{node}: {node_result.status}: {node_result.message}")
    return f"dbt {' '.join(args)} failed: " + ("; ".join(failures) or "no detail reported")
