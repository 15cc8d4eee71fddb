"""Running dbt in-process, with dbt-clickhouse routed to the embedded chDB engine.

dbt-clickhouse builds its clickhouse-connect client for HTTP. The embedded profile target
names the host `chdb`; for that host the client is built from TOPLIST_CLICKHOUSE_URL
(`chdb:///dir`) instead, in this process, so dbt shares the engine that the rest of Toplist
uses (chDB allows one data directory per process). That one override is the whole seam.

Parsing: each invocation checks its saved parse (~0.6 s here), and dbt re-parses the whole
project (~3 s) whenever `--vars` change, as they do for every publication given an as_of
(`toplist publish --as-of`, rebuilt history, the benchmarks). `invoke(..., reuse_parse=True)`
parses once per process and hands the parsed manifest to later runs (vars are applied when a
model is compiled, so a new as_of still takes effect); the manifest is parsed again when a
project file or the environment the profiles read changes.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import clickhouse_connect

from toplist.config import SHELF_K_MAX, Config
from toplist.snapshots import utc

log = logging.getLogger(__name__)

CHDB_HOST = "chdb"
# The keys of dbt_project.yml that name what dbt parses, beside that file and profiles.yml.
_PARSED_PATHS = (
    "model-paths",
    "macro-paths",
    "test-paths",
    "seed-paths",
    "analysis-paths",
    "snapshot-paths",
)

_parsed_lock = threading.Lock()
_parsed: dict[tuple, Any] = {}  # project state -> dbt's parsed manifest


# How a var carries an as_of (dbt_vars), and so how a compiled plan holds one (publish/plan.py).
AS_OF_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


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


def dbt_vars(config: Config, as_of: datetime | None) -> dict[str, object]:
    """What every board's models read from the configuration (dbt_project.yml `vars`)."""
    values: dict[str, object] = {
        "policy": config.policy,
        "policies": list(config.policies),
        "keep_top": config.keep_top,
        "board_keep_top": config.board_keep_top,
        "popular_keep_top": config.popular_keep_top,
        "shelf_fallback_top": SHELF_K_MAX,
        "scorings": list(config.scoring_versions),
        "listeners_expiry_seconds": config.listeners_expiry_seconds,
        "listeners_retention_hours": config.listeners_retention_hours,
    }
    if as_of is not None:
        values["as_of"] = values["board_as_of"] = utc(as_of).strftime(AS_OF_FORMAT)
    return values


def dbt_environment(config: Config) -> dict[str, str]:
    """The variables the profiles read, for this configuration: on a server, its host, port,
    user, password and TLS come from TOPLIST_CLICKHOUSE_URL, and the cluster (if any) from
    TOPLIST_CLICKHOUSE_CLUSTER, so dbt reaches the engine Toplist itself uses."""
    environment = {
        "TOPLIST_CLICKHOUSE_URL": config.clickhouse_url,
        "TOPLIST_DATABASE": config.database,
        "TOPLIST_CLICKHOUSE_CLUSTER": config.clickhouse_cluster,
        "TOPLIST_DBT_TARGET": os.environ.get(
            "TOPLIST_DBT_TARGET", "embedded" if config.embedded else "server"
        ),
    }
    if not config.embedded:
        url = urlsplit(config.clickhouse_url)
        secure = url.scheme == "https"
        environment |= {
            "TOPLIST_CLICKHOUSE_HOST": url.hostname or "localhost",
            "TOPLIST_CLICKHOUSE_PORT": str(url.port or (8443 if secure else 8123)),
            "TOPLIST_CLICKHOUSE_USER": unquote(url.username or "default"),
            "TOPLIST_CLICKHOUSE_PASSWORD": unquote(url.password or ""),
            "TOPLIST_CLICKHOUSE_SECURE": str(secure),  # True or False, as dbt's as_bool reads them
        }
    return environment


def invoke(
    config: Config, args: Sequence[str], *, quiet: bool = False, reuse_parse: bool = False
) -> Any:
    """Run one dbt command (for example ["build"]) in this process; raise DbtError on failure.

    With `reuse_parse`, the project is parsed once and reused by later calls (see above).
    Returns dbt's result object (`dbtRunnerResult.result`).
    """
    from dbt.cli.main import dbtRunner

    _route_embedded_host_to_chdb()
    os.environ.update(dbt_environment(config))
    manifest = _parsed_manifest(config, quiet) if reuse_parse else None
    full_args = _command(config, args, quiet)
    log.debug("dbt %s", " ".join(full_args))
    outcome = dbtRunner(manifest=manifest).invoke(full_args)
    if not outcome.success:
        raise DbtError(_describe_failure(args, outcome))
    return outcome.result


def _command(config: Config, args: Sequence[str], quiet: bool) -> list[str]:
    """dbt's command line: global flags, the command, then where the project is."""
    head = ["--quiet", "--log-level-file", "warn"] if quiet else []
    paths = ["--project-dir", str(config.dbt_project_dir)]
    paths += ["--profiles-dir", str(config.dbt_profiles_dir)]
    return [*head, *args, *paths]


def _parsed_manifest(config: Config, quiet: bool) -> Any:
    """The project parsed for this configuration, parsed again when its state changes."""
    from dbt.cli.main import dbtRunner

    parse = _command(config, ["parse"], quiet)
    state = (project_files(config), tuple(sorted(dbt_environment(config).items())), *parse)
    with _parsed_lock:
        if state not in _parsed:
            outcome = dbtRunner().invoke(parse)
            if not outcome.success:
                raise DbtError(_describe_failure(["parse"], outcome))
            _parsed.clear()  # only the latest state is worth keeping
            _parsed[state] = outcome.result
        return _parsed[state]


def project_files(config: Config) -> tuple[tuple[str, int, int], ...]:
    """Every file dbt parses, with its modification time and size."""
    import yaml

    project = Path(config.dbt_project_dir)
    settings = yaml.safe_load((project / "dbt_project.yml").read_text(encoding="utf-8"))
    files = [project / "dbt_project.yml", Path(config.dbt_profiles_dir) / "profiles.yml"]
    for key in _PARSED_PATHS:
        for directory in settings.get(key) or []:
            files += sorted(path for path in (project / directory).rglob("*") if path.is_file())
    state = []
    for path in files:
        stat = path.stat() if path.exists() else None
        state.append((str(path), stat.st_mtime_ns if stat else 0, stat.st_size if stat else -1))
    return tuple(state)


def _describe_failure(args: Sequence[str], outcome: Any) -> str:
    if outcome.exception is not None:
        return f"dbt {' '.join(args)} failed: {outcome.exception}"
    failures = []
    for node_result in getattr(outcome.result, "results", None) or []:
        if str(node_result.status) not in ("success", "pass", "skipped"):
            node = node_result.node.unique_id
            failures.append(f"{node}: {node_result.status}: {node_result.message}")
    return f"dbt {' '.join(args)} failed: " + ("; ".join(failures) or "no detail reported")
