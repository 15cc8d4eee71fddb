"""Shared fixtures: one real engine for the session, a fresh database per test.

By default the engine is embedded: chDB hosts one data directory per process, so the whole
test session shares one directory and isolates tests by database instead (TOPLIST_DATABASE),
exactly as deployments could. Given a ClickHouse server (`TOPLIST_CLICKHOUSE_URL=http://...`,
and `TOPLIST_CLICKHOUSE_CLUSTER` for a cluster), the same tests run against it, each in a
database of its own that it drops afterwards; tests marked `embedded_only` are skipped there.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# Before anything imports Toplist: the engine directory for the whole session.
_GIVEN_URL = os.environ.get("TOPLIST_CLICKHOUSE_URL", "")
SERVER_URL = _GIVEN_URL if _GIVEN_URL.startswith(("http://", "https://")) else ""
_ENGINE_DIR = Path(tempfile.mkdtemp(prefix="toplist-tests-")) / "chdb"
os.environ["TOPLIST_CLICKHOUSE_URL"] = os.environ.get(
    "TOPLIST_TEST_CLICKHOUSE_URL", SERVER_URL or f"chdb://{_ENGINE_DIR}"
)

# Every batch a test writes is applied in two parts side by side, however small, so every
# guarantee below is held with the lanes a production batch is applied in.
os.environ.setdefault("TOPLIST_INGEST_LANES", "2")
os.environ.setdefault("TOPLIST_INGEST_LANE_ROWS", "1")

from clickhouse_connect.driver.client import Client  # noqa: E402

from toplist.config import Config  # noqa: E402
from toplist.engine import connect  # noqa: E402
from toplist.migrate import discover, migrate  # noqa: E402


def pytest_report_header() -> str:
    url = os.environ["TOPLIST_CLICKHOUSE_URL"]
    if url.startswith("chdb:"):
        return f"toplist: the embedded engine (chDB) at {url}"
    cluster = os.environ.get("TOPLIST_CLICKHOUSE_CLUSTER", "")
    where = f", cluster {cluster}" if cluster else ""
    return f"toplist: the ClickHouse server at {url.split('@')[-1]}{where} (embedded_only skipped)"


def pytest_collection_modifyitems(config, items) -> None:
    if os.environ["TOPLIST_CLICKHOUSE_URL"].startswith("chdb:"):
        return
    skip = pytest.mark.skip(reason="needs the embedded engine (TOPLIST_CLICKHOUSE_URL is a server)")
    for item in items:
        if item.get_closest_marker("embedded_only"):
            item.add_marker(skip)


@pytest.fixture
def config() -> Config:
    return own_config()


def own_config() -> Config:
    """A configuration pointing at a database of its own. Live listeners' state is kept for
    good: the tests' reports are at fixed dates, which a retention on the wall clock would
    leave out some day (tests/test_boards.py holds the retention, at the present time)."""
    return Config.from_env(
        database=f"t_{uuid.uuid4().hex[:12]}", cache_poll_seconds=0.001, listeners_retention_hours=0
    )


@pytest.fixture
def client(config: Config) -> Iterator[Client]:
    client = connect(config)
    migrate(client, config)
    try:
        yield client
    finally:
        _drop(client, config)


@contextmanager
def migrated_before(version: int, sql_dir: Path) -> Iterator[tuple[Client, Config]]:
    """A database of its own migrated up to migration `version`, not including it (their files
    copied into `sql_dir`): what an upgrade to `version` starts from. Dropped afterwards."""
    config = own_config()
    for migration in discover():
        if migration.version < version:
            (sql_dir / migration.path.name).write_text(migration.text)
    client = connect(config)
    try:
        migrate(client, config, sql_dir=sql_dir)
        yield client, config
    finally:
        _drop(client, config)


def _drop(client: Client, config: Config) -> None:
    on_cluster = f" ON CLUSTER '{config.clickhouse_cluster}'" if config.clickhouse_cluster else ""
    client.command(f"DROP DATABASE IF EXISTS {config.database}{on_cluster} SYNC")
    client.close()


@pytest.fixture(scope="module")
def served():
    """The API over HTTP on a free port, with a published snapshot (tests/live_api.py)."""
    from live_api import live_api

    with live_api(own_config()) as api:
        yield api


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory) -> Iterator[str]:
    """A real Kafka broker: the one `.ci/run` started (TOPLIST_TEST_KAFKA_BROKERS), or our own."""
    given = os.environ.get("TOPLIST_TEST_KAFKA_BROKERS")
    if given:
        yield given
        return
    from ingest.kafka_broker import start_broker

    broker = start_broker(tmp_path_factory.mktemp("kafka"))
    try:
        yield broker.bootstrap
    finally:
        broker.stop()
