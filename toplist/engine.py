"""Opening ClickHouse: embedded chDB (`chdb:///dir`) or a server (`http://host:8123`).

Both go through clickhouse-connect, so every other module speaks to one client type and the
SQL is the same in both modes; only the URL differs.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sys
import tempfile
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import clickhouse_connect
from clickhouse_connect.driver.client import Client

from toplist.config import Config, chdb_path

log = logging.getLogger(__name__)

# Opening the embedded engine redirects this process's stderr for a moment (_open_embedded):
# one thread at a time, or a second thread would restore the first one's redirection.
_OPENING = threading.Lock()
# The configuration each client was opened with, and the clients opened beside it to work on
# more than one core (`lanes`), closed with it.
_OPENED_WITH: weakref.WeakKeyDictionary[Client, Config] = weakref.WeakKeyDictionary()
_LANES: weakref.WeakKeyDictionary[Client, list[Client]] = weakref.WeakKeyDictionary()
_LANES_LOCK = threading.Lock()


class EngineInUse(RuntimeError):
    """The embedded data directory is owned by another process."""


def connect(config: Config) -> Client:
    """A new client for the configured engine. Tables are always named with their database."""
    if config.embedded:
        client = _open_embedded(config.clickhouse_url)
    else:
        client = clickhouse_connect.get_client(dsn=config.clickhouse_url)
    log.debug("connected to %s (ClickHouse %s)", config.clickhouse_url, client.server_version)
    _OPENED_WITH[client] = config
    return client


def opened_with(client: Client) -> Config | None:
    """The configuration `connect` opened `client` with (None for a client it did not open)."""
    return _OPENED_WITH.get(client)


def lanes(client: Client) -> list[Client]:
    """`client` and the clients beside it that work on the same engine at the same time, one
    per ingest lane (`TOPLIST_INGEST_LANES`): each runs its statements on a core of its own
    (a client runs one statement at a time). Opened at the first call and kept with `client`;
    only `client` itself for a client this module did not open. Closing `client` closes them
    (an open embedded client keeps its data directory's engine open)."""
    config = _OPENED_WITH.get(client)
    if config is None or config.ingest_lanes <= 1:
        return [client]
    with _LANES_LOCK:
        others = _LANES.get(client)
        if others is None:
            others = [connect(config) for _ in range(config.ingest_lanes - 1)]
            _LANES[client] = others
            close = client.close

            def close_with_lanes() -> None:
                for other in others:
                    other.close()
                close()

            client.close = close_with_lanes  # type: ignore[method-assign]
    return [client, *others]


def _open_embedded(url: str) -> Client:
    """chDB opened in this process. One process owns a data directory: when another holds it,
    the engine prints a line of its own and fails with a message that names no cause (`Error
    initializing EmbeddedServer`), so what it prints meanwhile is held back, and the failure
    becomes `EngineInUse` saying what to do; otherwise what it printed is passed on."""
    directory = chdb_path(url)
    directory.mkdir(parents=True, exist_ok=True)
    in_use = False
    with _OPENING, tempfile.TemporaryFile() as said:
        sys.stderr.flush()
        stderr = os.dup(2)
        os.dup2(said.fileno(), 2)
        try:
            return clickhouse_connect.get_client(dsn=url)
        except Exception:
            in_use = _locked_elsewhere(directory / "status")
            if in_use:
                raise EngineInUse(
                    f"the data directory {directory} is in use by another Toplist process"
                    " (embedded ClickHouse lets one process own it): stop that process, or run"
                    " this inside it (`toplist serve --ingest` loads from Kafka), or point"
                    " TOPLIST_CLICKHOUSE_URL at a ClickHouse server"
                ) from None
            raise
        finally:
            os.dup2(stderr, 2)
            os.close(stderr)
            said.seek(0)
            text = said.read()
            if text and not in_use:
                sys.stderr.write(text.decode(errors="replace"))


def _locked_elsewhere(status: Path) -> bool:
    """Whether a process holds the engine's lock on `status` (ClickHouse flocks it). Asked
    only after this process failed to open the engine, so the holder is another process."""
    try:
        with open(status, "rb") as file:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(file, fcntl.LOCK_UN)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


@contextmanager
def session(config: Config) -> Iterator[Client]:
    """Open the engine for one command and close it afterwards."""
    client = connect(config)
    try:
        yield client
    finally:
        client.close()
