"""Opening ClickHouse: embedded chDB (`chdb:///dir`) or a server (`http://host:8123`).

Both go through clickhouse-connect, so every other module speaks to one client type and the
SQL is the same in both modes; only the URL differs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import clickhouse_connect
from clickhouse_connect.driver.client import Client

from toplist.config import Config

log = logging.getLogger(__name__)


def chdb_path(url: str) -> Path:
    """The data directory of a `chdb:///dir` URL."""
    if not url.startswith("chdb://"):
        raise ValueError(f"not a chdb URL: {url!r}")
    return Path(url.removeprefix("chdb://"))


def connect(config: Config) -> Client:
    """A new client for the configured engine. Tables are always named with their database."""
    if config.embedded:
        chdb_path(config.clickhouse_url).mkdir(parents=True, exist_ok=True)
    client = clickhouse_connect.get_client(dsn=config.clickhouse_url)
    log.debug("connected to %s (ClickHouse %s)", config.clickhouse_url, client.server_version)
    return client


@contextmanager
def session(config: Config) -> Iterator[Client]:
    """Open the engine for one command and close it afterwards."""
    client = connect(config)
    try:
        yield client
    finally:
        client.close()
