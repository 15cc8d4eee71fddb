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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import clickhouse_connect
from clickhouse_connect.driver.client import Client

from toplist.config import Config

log = logging.getLogger(__name__)

# Opening the embedded engine redirects this process's stderr for a moment (_open_embedded):
# one thread at a time, or a second thread would restore the first one's redirection.
_OPENING = threading.Lock()


def chdb_path(url: str) -> Path:
    """The data directory of a `chdb:///dir` URL."""
    if not url.startswith("chdb://"):
        raise ValueError(f"not a chdb URL: {url!r}")
    return Path(url.removeprefix("chdb://"))


class EngineInUse(RuntimeError):
    """The embedded data directory is owned by another process."""


def connect(config: Config) -> Client:
    """A new client for the configured engine. Tables are always named with their database."""
    if config.embedded:
        client = _open_embedded(config.clickhouse_url)
    else:
        client = clickhouse_connect.get_client(dsn=config.clickhouse_url)
    log.debug("connected to %s (ClickHouse %s)", config.clickhouse_url, client.server_version)
    return client


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
