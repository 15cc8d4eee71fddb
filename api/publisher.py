"""Publishing a snapshot: run the dbt rankings at an as_of, then make them current atomically.

Order of work, and why a failure anywhere leaves the previous snapshot current:
1. dbt builds `chart_rankings` (and the models it needs) for the as_of;
2. its rows are copied into `chart_entries` under a new snapshot_id, and counted back;
3. only then the registry row goes into `chart_snapshots`. Readers follow registry rows
   only, so until step 3 nobody sees the new entries; a failed run deletes what it wrote.

The other boards (live listeners, the flash sale, the marketplace shelves) are published the
same way by `publish_board`, from their own dbt models (models/boards/) into `board_entries`
and `board_snapshots` (sql/0014), each on its own schedule.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import UTC, datetime

from clickhouse_connect.driver.client import Client

from toplist import dbt
from toplist.config import Config

log = logging.getLogger(__name__)

_publish_lock = threading.Lock()


class PublishError(RuntimeError):
    """A publication did not complete; the previous snapshot stays current."""


def check_as_of(as_of: datetime | None, current: datetime | None, allow_older: bool) -> None:
    """Refuse an as_of in the future (a typo would publish empty windows, served as current)
    and, unless `allow_older`, one older than the current snapshot's (which would replace it
    with an earlier view). The current as_of is aligned, so comparing before alignment is
    the same as after."""
    if as_of is None:
        return
    now = datetime.now(UTC)
    if utc(as_of) > now:
        raise PublishError(
            f"as_of {iso(utc(as_of))} is in the future (now {iso(now)}); nothing was published"
        )
    if current is not None and utc(as_of) < current and not allow_older:
        raise PublishError(
            f"as_of {iso(utc(as_of))} is older than the current snapshot's ({iso(current)});"
            " ask for it explicitly (--allow-older) to publish it"
        )


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: str
    as_of: datetime
    policy: str
    published_at: datetime
    entry_count: int
    keep_top: int
    duration_ms: int
    policies: tuple[str, ...] = ("v1",)
    void_count: int = 0

    def as_dict(self) -> dict[str, object]:
        return as_json(self)


SNAPSHOT_COLUMNS = (
    "snapshot_id, as_of, policy, published_at, entry_count, keep_top, duration_ms,"
    " policies, void_count"
)


def as_json(snapshot: Snapshot | BoardSnapshot) -> dict[str, object]:
    """A snapshot's fields, in order, as JSON values (times in RFC 3339, tuples as lists)."""
    return {
        name: iso(value)
        if isinstance(value, datetime)
        else list(value)
        if isinstance(value, tuple)
        else value
        for name, value in ((f.name, getattr(snapshot, f.name)) for f in fields(snapshot))
    }


def iso(moment: datetime) -> str:
    """RFC 3339 in UTC with a Z, to the second (or millisecond when it has them)."""
    moment = utc(moment)
    spec = "milliseconds" if moment.microsecond else "seconds"
    return moment.isoformat(timespec=spec).replace("+00:00", "Z")


def utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def snapshot_from_row(row: tuple) -> Snapshot:
    (snapshot_id, as_of, policy, published_at, entry_count, keep_top, duration_ms) = row[:7]
    policies, void_count = row[7:]
    return Snapshot(
        snapshot_id=snapshot_id,
        as_of=utc(as_of),
        policy=policy,
        published_at=utc(published_at),
        entry_count=int(entry_count),
        keep_top=int(keep_top),
        duration_ms=int(duration_ms),
        policies=tuple(policies),
        void_count=int(void_count),
    )


def registry_row(snapshot: Snapshot) -> list[object]:
    """The registry row of a snapshot, in SNAPSHOT_COLUMNS order."""
    return [
        snapshot.snapshot_id,
        snapshot.as_of,
        snapshot.policy,
        snapshot.published_at,
        snapshot.entry_count,
        snapshot.keep_top,
        snapshot.duration_ms,
        list(snapshot.policies),
        snapshot.void_count,
    ]


def current_snapshot(client: Client, database: str) -> Snapshot | None:
    """The latest complete snapshot, or None before the first publication."""
    rows = client.query(
        f"SELECT {SNAPSHOT_COLUMNS} FROM {database}.chart_snapshots"
        " ORDER BY published_at DESC, snapshot_id DESC LIMIT 1"
    ).result_rows
    return snapshot_from_row(rows[0]) if rows else None


def publish(
    client: Client,
    config: Config,
    as_of: datetime | None = None,
    *,
    before_commit: Callable[[str], None] | None = None,
    allow_older: bool = False,
) -> Snapshot:
    """Rank at `as_of` (default now; aligned down to the bucket) and publish one snapshot.

    `before_commit` runs after the entries are written and before the snapshot becomes
    current; an exception there aborts the publication like any other failure would. An
    as_of in the future is refused, and so is one older than the current snapshot's unless
    `allow_older` (`check_as_of`).
    """
    with _publish_lock:
        current = current_snapshot(client, config.database)
        check_as_of(as_of, current.as_of if current else None, allow_older)
        return _publish(client, config, as_of, before_commit)


def _publish(
    client: Client,
    config: Config,
    as_of: datetime | None,
    before_commit: Callable[[str], None] | None,
) -> Snapshot:
    db = config.database
    started = time.monotonic()
    dbt_vars = {
        "policy": config.policy,
        "policies": list(config.policies),
        "keep_top": config.keep_top,
    }
    # Read before ranking: every void counted here is reflected in the snapshot (one made
    # while the ranking runs may be reflected too, and is counted by the next snapshot).
    void_count = int(client.command(f"SELECT uniqExact(event_id) FROM {db}.listen_voids"))
    if as_of is not None:
        dbt_vars["as_of"] = utc(as_of).strftime("%Y-%m-%d %H:%M:%S.%f")
    try:
        dbt.invoke(
            config,
            ["run", "--select", "+chart_rankings", "--vars", repr(dbt_vars)],
            quiet=True,
            reuse_parse=True,
        )
    except dbt.DbtError as error:
        raise PublishError(f"ranking failed, nothing was published: {error}") from error

    aligned, policy, policies, keep_top = client.query(
        f"SELECT as_of, policy, policies, keep_top FROM {db}.int_chart__as_of"
    ).result_rows[0]
    aligned = utc(aligned)
    snapshot_id = f"{aligned:%Y%m%dT%H%MZ}-{uuid.uuid4().hex[:12]}"
    try:
        client.command(
            f"""
            INSERT INTO {db}.chart_entries
                (snapshot_id, policy, window_name, scope, rank, song_id, listens)
            SELECT {{snapshot_id:String}}, policy, window_name, scope, rank, song_id, listens
            FROM {db}.chart_rankings
            """,
            parameters={"snapshot_id": snapshot_id},
        )
        expected = int(client.command(f"SELECT count() FROM {db}.chart_rankings"))
        written = int(
            client.command(
                f"SELECT count() FROM {db}.chart_entries WHERE snapshot_id = {{id:String}}",
                parameters={"id": snapshot_id},
            )
        )
        if written != expected:
            raise PublishError(f"wrote {written} entries for {snapshot_id}, expected {expected}")
        if before_commit:
            before_commit(snapshot_id)
        now = datetime.now(UTC)  # stored to the millisecond, so keep no more than that
        published_at = now.replace(microsecond=now.microsecond // 1000 * 1000)
        duration_ms = int((time.monotonic() - started) * 1000)
        snapshot = Snapshot(
            snapshot_id,
            aligned,
            policy,
            published_at,
            written,
            int(keep_top),
            duration_ms,
            tuple(policies),
            void_count,
        )
        client.insert(
            f"{db}.chart_snapshots",
            [registry_row(snapshot)],
            column_names=[c.strip() for c in SNAPSHOT_COLUMNS.split(",")],
        )
    except Exception:
        _discard_entries(client, db, snapshot_id)
        raise
    _prune(client, config)
    log.info(
        "published snapshot %s (as_of %s, policies %s, %d entries, %d voids, %d ms)",
        snapshot_id,
        iso(aligned),
        ",".join(policies),
        written,
        void_count,
        duration_ms,
    )
    return snapshot


def _discard_entries(
    client: Client, db: str, snapshot_id: str, entries: str = "chart_entries"
) -> None:
    try:
        client.command(
            f"DELETE FROM {db}.{entries} WHERE snapshot_id = {{id:String}}",
            parameters={"id": snapshot_id},
        )
    except Exception:  # the registry never names it, so leftovers are invisible; log only
        log.exception("could not remove the entries of failed snapshot %s", snapshot_id)


def _prune(client: Client, config: Config, board: str | None = None) -> None:
    """Keep the newest `snapshot_retention` snapshots (of `board`, or of the charts); older
    entries are deleted."""
    db = config.database
    registry, entries = ("board_snapshots", "board_entries") if board else _CHART_TABLES
    of_board = "WHERE board = {board:String}" if board else ""
    stale = client.query(
        f"""
        SELECT snapshot_id FROM {db}.{registry} {of_board}
        ORDER BY published_at DESC, snapshot_id DESC
        LIMIT 1000000 OFFSET {{keep:UInt32}}
        """,
        parameters={"keep": config.snapshot_retention, "board": board or ""},
    ).result_rows
    if not stale:
        return
    ids = [row[0] for row in stale]
    for table in (registry, entries):
        client.command(
            f"DELETE FROM {db}.{table} WHERE snapshot_id IN {{ids:Array(String)}}",
            parameters={"ids": ids},
        )


_CHART_TABLES = ("chart_snapshots", "chart_entries")

# Each other board's dbt models: the ranked entries and the one-row summary (as_of, stats).
BOARD_MODELS = {
    "listeners": ("listener_rankings", "listener_summary"),
    "sale": ("sale_rankings", "sale_summary"),
    "popular": ("popular_rankings", "popular_summary"),
}
BOARD_POLICY = "v1"  # the other boards rank with the charts' default tie policy


@dataclass(frozen=True)
class BoardSnapshot:
    """A published snapshot of one of the other boards."""

    board: str
    snapshot_id: str
    as_of: datetime
    policy: str
    published_at: datetime
    entry_count: int
    keep_top: int
    duration_ms: int
    stats: dict[str, float]

    def as_dict(self) -> dict[str, object]:
        return as_json(self)


BOARD_SNAPSHOT_COLUMNS = (
    "board, snapshot_id, as_of, policy, published_at, entry_count, keep_top, duration_ms, stats"
)


def current_board_snapshot(client: Client, database: str, board: str) -> BoardSnapshot | None:
    """The latest complete snapshot of `board`, or None before its first publication."""
    rows = client.query(
        f"SELECT {BOARD_SNAPSHOT_COLUMNS} FROM {database}.board_snapshots"
        " WHERE board = {board:String} ORDER BY published_at DESC, snapshot_id DESC LIMIT 1",
        parameters={"board": board},
    ).result_rows
    if not rows:
        return None
    board, snapshot_id, as_of, policy, published_at, count, keep_top, duration_ms, stats = rows[0]
    return BoardSnapshot(
        board,
        snapshot_id,
        utc(as_of),
        policy,
        utc(published_at),
        int(count),
        int(keep_top),
        int(duration_ms),
        {name: float(value) for name, value in stats.items()},
    )


def publish_board(
    client: Client,
    config: Config,
    board: str,
    as_of: datetime | None = None,
    *,
    before_commit: Callable[[str], None] | None = None,
    allow_older: bool = False,
) -> BoardSnapshot:
    """Rank one of the other boards at `as_of` (default now) and publish one snapshot of it,
    with the same guarantees as `publish`."""
    if board not in BOARD_MODELS:
        raise ValueError(f"unknown board {board!r}; known: {', '.join(BOARD_MODELS)}")
    with _publish_lock:
        current = current_board_snapshot(client, config.database, board)
        check_as_of(as_of, current.as_of if current else None, allow_older)
        return _publish_board(client, config, board, as_of, before_commit)


def _publish_board(
    client: Client,
    config: Config,
    board: str,
    as_of: datetime | None,
    before_commit: Callable[[str], None] | None,
) -> BoardSnapshot:
    db = config.database
    started = time.monotonic()
    rankings, summary = BOARD_MODELS[board]
    keep_top = config.keep_top_of(board)
    dbt_vars: dict[str, object] = {
        "board_keep_top": config.board_keep_top,
        "popular_keep_top": config.popular_keep_top,
        "listeners_expiry_seconds": config.listeners_expiry_seconds,
        "listeners_retention_hours": config.listeners_retention_hours,
    }
    if as_of is not None:
        dbt_vars["board_as_of"] = utc(as_of).strftime("%Y-%m-%d %H:%M:%S.%f")
    try:
        dbt.invoke(
            config,
            ["run", "--select", f"+{rankings} +{summary}", "--vars", repr(dbt_vars)],
            quiet=True,
            reuse_parse=True,
        )
    except dbt.DbtError as error:
        raise PublishError(f"{board}: ranking failed, nothing was published: {error}") from error

    aligned, stats = client.query(f"SELECT as_of, stats FROM {db}.{summary}").result_rows[0]
    aligned = utc(aligned)
    snapshot_id = f"{board}-{aligned:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:12]}"
    try:
        client.command(
            f"""
            INSERT INTO {db}.board_entries
                (board, snapshot_id, scope, metric, window_name, rank, item_id, score, extra)
            SELECT {{board:String}}, {{snapshot_id:String}}, scope, metric, window_name, rank,
                item_id, score, extra
            FROM {db}.{rankings}
            """,
            parameters={"board": board, "snapshot_id": snapshot_id},
        )
        expected = int(client.command(f"SELECT count() FROM {db}.{rankings}"))
        written = int(
            client.command(
                f"SELECT count() FROM {db}.board_entries"
                " WHERE board = {board:String} AND snapshot_id = {id:String}",
                parameters={"board": board, "id": snapshot_id},
            )
        )
        if written != expected:
            raise PublishError(f"wrote {written} entries for {snapshot_id}, expected {expected}")
        if before_commit:
            before_commit(snapshot_id)
        now = datetime.now(UTC)
        snapshot = BoardSnapshot(
            board,
            snapshot_id,
            aligned,
            BOARD_POLICY,
            now.replace(microsecond=now.microsecond // 1000 * 1000),
            written,
            keep_top,
            int((time.monotonic() - started) * 1000),
            {name: float(value) for name, value in stats.items()},
        )
        client.insert(
            f"{db}.board_snapshots",
            [
                [
                    board,
                    snapshot_id,
                    aligned,
                    BOARD_POLICY,
                    snapshot.published_at,
                    written,
                    keep_top,
                    snapshot.duration_ms,
                    snapshot.stats,
                ]
            ],
            column_names=[c.strip() for c in BOARD_SNAPSHOT_COLUMNS.split(",")],
        )
    except Exception:
        _discard_entries(client, db, snapshot_id, "board_entries")
        raise
    _prune(client, config, board)
    log.info(
        "published %s snapshot %s (as_of %s, %d entries, %d ms)",
        board,
        snapshot_id,
        iso(aligned),
        written,
        snapshot.duration_ms,
    )
    return snapshot
