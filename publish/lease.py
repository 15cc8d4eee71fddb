"""One publisher per board at a time, across processes: a lease held in the engine.

Two publications of one board must never interleave: they share dbt's model tables, so one
would copy the other's rankings. A lease is a term number per board in `publication_leases`
(sql/0021). To publish, a process reads the board's latest term; if it is held (claimed, not
released, younger than LEASE_SECONDS) the publication is refused. Otherwise the process
claims the next term with the insert deduplication token '<board>/<term>': ClickHouse keeps
only the first insert of a token (MergeTree's deduplication window, Keeper on a cluster), so
of two processes claiming one term exactly one finds its own claim there. The winner releases
the term when it is done; a holder that died is waited out for LEASE_SECONDS, except in
embedded mode, where the engine's directory lock means no other process can be alive: a claim
of another process there is a dead one's.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from clickhouse_connect.driver.client import Client

from toplist.config import Config

log = logging.getLogger(__name__)

# A publication takes seconds; a holder that has not released its lease after this is dead.
LEASE_SECONDS = 300

# This process, in every claim it makes: host, pid and a token (pids are reused).
PROCESS = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class LeaseRefused(RuntimeError):
    """Another publisher holds the board's lease; nothing was published."""


def latest_sql(database: str) -> str:
    """The board's latest term, read by the table's order: a live board claims two terms a
    second, and its week of them (the TTL) summed whole took 0.12 s of every publication."""
    return f"""
        SELECT term, anyIf(holder, kind = 'claim'), countIf(kind = 'release') > 0,
               dateDiff('millisecond', maxIf(at, kind = 'claim'), now64(3)) / 1000
        FROM {database}.publication_leases
        WHERE board = {{board:String}} AND term = (
            SELECT term FROM {database}.publication_leases WHERE board = {{board:String}}
            ORDER BY term DESC LIMIT 1)
        GROUP BY term
    """


def _latest(client: Client, database: str, board: str) -> tuple[int, str, bool, float]:
    """(term, holder, released, age in seconds) of the board's latest term; term 0 if none."""
    rows = client.query(latest_sql(database), parameters={"board": board}).result_rows
    if not rows:
        return 0, "", True, 0.0
    term, holder, released, age = rows[0]
    return int(term), holder, bool(released), float(age)


def _insert(client: Client, database: str, board: str, term: int, kind: str, holder: str):
    client.command(
        f"""
        INSERT INTO {database}.publication_leases (board, term, kind, holder)
        SETTINGS insert_deduplication_token = {{token:String}}
        VALUES ({{board:String}}, {{term:UInt64}}, {{kind:String}}, {{holder:String}})
        """,
        parameters={
            "token": f"{board}/{term}/{kind}",
            "board": board,
            "term": term,
            "kind": kind,
            "holder": holder,
        },
    )


@dataclass(frozen=True)
class Lease:
    term: int
    # The term before was never released: its holder died, maybe in the middle of a
    # publication (whose entries the new holder then removes).
    after_crash: bool


def claim(client: Client, config: Config, board: str, holder: str = PROCESS) -> Lease:
    """Claim the board's lease for `holder`, or raise LeaseRefused."""
    database = config.database
    term, current, released, age = _latest(client, database, board)
    # Embedded, the engine's directory lock keeps every other process out: a claim left by
    # another process is a dead one's.
    alive = age < LEASE_SECONDS and not config.embedded
    if term and not released and alive and current != holder:
        raise LeaseRefused(
            f"another publisher ({current}) has been publishing the {board} board for"
            f" {age:.0f} s; nothing was published (its lease lapses after {LEASE_SECONDS} s)"
        )
    taken = take_term(client, database, board, term + 1, holder)
    return Lease(taken, after_crash=bool(term) and not released)


def take_term(client: Client, database: str, board: str, term: int, holder: str) -> int:
    """Claim `term` of the board's lease: of every holder that claims it, the first insert
    wins; the others get LeaseRefused."""
    _insert(client, database, board, term, "claim", holder)
    rows = client.query(
        f"""
        SELECT holder FROM {database}.publication_leases
        WHERE board = {{board:String}} AND term = {{term:UInt64}} AND kind = 'claim'
        """,
        parameters={"board": board, "term": term},
    ).result_rows
    if [row[0] for row in rows] != [holder]:
        winner = rows[0][0] if rows else "another publisher"
        raise LeaseRefused(
            f"{winner} began publishing the {board} board at the same moment; nothing was published"
        )
    return term


def release(client: Client, config: Config, board: str, term: int, holder: str = PROCESS):
    _insert(client, config.database, board, term, "release", holder)


# Within one process every claim names the same holder, so the lease alone would let two of
# its threads (the board's scheduled publication and a requested one, or a rebuild job) into
# one board at once: they would share its model tables, and the older snapshot's file could be
# written last. A lock per board keeps them one at a time; the lease keeps out other processes.
_locks_lock = threading.Lock()
_locks: dict[tuple[str, str], threading.Lock] = {}


def _board_lock(config: Config, board: str) -> threading.Lock:
    with _locks_lock:
        return _locks.setdefault((config.database, board), threading.Lock())


@contextmanager
def publication_lease(
    client: Client, config: Config, board: str, holder: str = PROCESS
) -> Iterator[Lease]:
    """Hold the board's lease for the duration of the block (one thread of this process at a
    time, and no other process)."""
    with _board_lock(config, board):
        lease = claim(client, config, board, holder)
        try:
            yield lease
        finally:
            try:
                release(client, config, board, lease.term, holder)
            except Exception:  # it lapses after LEASE_SECONDS
                log.exception("could not release the %s publication lease", board)
