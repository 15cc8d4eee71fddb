"""Publishing a snapshot: run the dbt rankings at an as_of, then make them current atomically.

Order of work, and why a failure anywhere leaves the previous snapshot current:
1. dbt builds `chart_rankings` (and the models it needs) for the as_of;
2. its rows are copied into `chart_entries` under a new snapshot_id, and counted back;
3. only then the registry row goes into `chart_snapshots`. Readers follow registry rows
   only, so until step 3 nobody sees the new entries; a failed run deletes what it wrote.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from clickhouse_connect.driver.client import Client

from toplist import dbt
from toplist.config import Config

log = logging.getLogger(__name__)

_publish_lock = threading.Lock()


class PublishError(RuntimeError):
    """A publication did not complete; the previous snapshot stays current."""


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
        return {
            "snapshot_id": self.snapshot_id,
            "as_of": iso(self.as_of),
            "policy": self.policy,
            "published_at": iso(self.published_at),
            "entry_count": self.entry_count,
            "keep_top": self.keep_top,
            "duration_ms": self.duration_ms,
            "policies": list(self.policies),
            "void_count": self.void_count,
        }


SNAPSHOT_COLUMNS = (
    "snapshot_id, as_of, policy, published_at, entry_count, keep_top, duration_ms,"
    " policies, void_count"
)


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
) -> Snapshot:
    """Rank at `as_of` (default now; aligned down to the bucket) and publish one snapshot.

    `before_commit` runs after the entries are written and before the snapshot becomes
    current; an exception there aborts the publication like any other failure would.
    """
    with _publish_lock:
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


def _discard_entries(client: Client, db: str, snapshot_id: str) -> None:
    try:
        client.command(
            f"DELETE FROM {db}.chart_entries WHERE snapshot_id = {{id:String}}",
            parameters={"id": snapshot_id},
        )
    except Exception:  # the registry never names it, so leftovers are invisible; log only
        log.exception("could not remove the entries of failed snapshot %s", snapshot_id)


def _prune(client: Client, config: Config) -> None:
    """Keep the newest `snapshot_retention` snapshots; older entries are deleted."""
    db = config.database
    stale = client.query(
        f"""
        SELECT snapshot_id FROM {db}.chart_snapshots
        ORDER BY published_at DESC, snapshot_id DESC
        LIMIT 1000000 OFFSET {{keep:UInt32}}
        """,
        parameters={"keep": config.snapshot_retention},
    ).result_rows
    if not stale:
        return
    ids = [row[0] for row in stale]
    client.command(
        f"DELETE FROM {db}.chart_snapshots WHERE snapshot_id IN {{ids:Array(String)}}",
        parameters={"ids": ids},
    )
    client.command(
        f"DELETE FROM {db}.chart_entries WHERE snapshot_id IN {{ids:Array(String)}}",
        parameters={"ids": ids},
    )
