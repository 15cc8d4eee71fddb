"""The snapshot registry: what a published snapshot is, and how to find a board's current one.

Every board, the charts included, publishes into the same two tables (sql/0021):
`board_entries` (its ranked rows, under a snapshot_id) and `board_snapshots` (one row per
publication, written last). Readers follow registry rows only, so a snapshot is seen whole or
not at all. The publication stage (publish/) writes them; the API (api/) reads them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime

from clickhouse_connect.driver.client import Client

REGISTRY = "board_snapshots"
ENTRIES = "board_entries"


@dataclass(frozen=True)
class Snapshot:
    """One published snapshot of one board."""

    board: str
    snapshot_id: str
    as_of: datetime
    policy: str  # the policy served by default
    published_at: datetime
    entry_count: int
    keep_top: int
    duration_ms: int
    policies: tuple[str, ...] = ("v1",)  # every policy it was ranked with
    void_count: int = 0  # the voided events it reflects
    stats: dict[str, float] = field(default_factory=dict, hash=False)  # the board's totals

    @property
    def started_at(self) -> float:
        """When its publication began, as a Unix time (what it read was there by then)."""
        return self.published_at.timestamp() - self.duration_ms / 1000

    def as_dict(self) -> dict[str, object]:
        """Its fields, in order, as JSON values (times in RFC 3339, tuples as lists)."""
        return {
            name: iso(value)
            if isinstance(value, datetime)
            else list(value)
            if isinstance(value, tuple)
            else value
            for name, value in ((f.name, getattr(self, f.name)) for f in fields(self))
        }


COLUMNS = (
    "board, snapshot_id, as_of, policy, published_at, entry_count, keep_top, duration_ms,"
    " policies, void_count, stats"
)
COLUMN_NAMES = [name.strip() for name in COLUMNS.split(",")]


def iso(moment: datetime) -> str:
    """RFC 3339 in UTC with a Z, to the second (or millisecond when it has them)."""
    moment = utc(moment)
    spec = "milliseconds" if moment.microsecond else "seconds"
    return moment.isoformat(timespec=spec).replace("+00:00", "Z")


def utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def from_row(row: tuple) -> Snapshot:
    board, snapshot_id, as_of, policy, published_at, count, keep_top, duration_ms = row[:8]
    policies, void_count, stats = row[8:]
    return Snapshot(
        board=board,
        snapshot_id=snapshot_id,
        as_of=utc(as_of),
        policy=policy,
        published_at=utc(published_at),
        entry_count=int(count),
        keep_top=int(keep_top),
        duration_ms=int(duration_ms),
        policies=tuple(policies),
        void_count=int(void_count),
        stats={name: float(value) for name, value in stats.items()},
    )


def registry_row(snapshot: Snapshot) -> list[object]:
    """The registry row of a snapshot, in COLUMNS order."""
    values = (getattr(snapshot, name) for name in COLUMN_NAMES)
    return [list(value) if isinstance(value, tuple) else value for value in values]


def current_snapshot(client: Client, database: str, board: str) -> Snapshot | None:
    """The latest complete snapshot of `board`, or None before its first publication."""
    rows = client.query(
        f"SELECT {COLUMNS} FROM {database}.{REGISTRY} WHERE board = {{board:String}}"
        " ORDER BY published_at DESC, snapshot_id DESC LIMIT 1",
        parameters={"board": board},
    ).result_rows
    return from_row(rows[0]) if rows else None


def request_publication(client: Client, database: str, board: str, reason: str) -> float:
    """Ask the publisher for a snapshot of `board` (sql/0021 publication_requests); returns
    the request's time, as a Unix time, for `wait_for_publication`."""
    requested_at = datetime.now(UTC)
    client.insert(
        f"{database}.publication_requests",
        [[board, requested_at, reason]],
        column_names=["board", "requested_at", "reason"],
    )
    return requested_at.timestamp()


def wait_for_publication(
    client: Client, database: str, board: str, requested_at: float, timeout: float
) -> Snapshot | None:
    """The first snapshot of `board` whose publication began after `requested_at`, or None
    when the publisher has published none within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        snapshot = current_snapshot(client, database, board)
        if snapshot is not None and snapshot.started_at >= requested_at:
            return snapshot
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)
