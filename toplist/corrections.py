"""Corrections on the raw events: voiding event ids, and rebuilding aggregates from raw.

Voided events stay in `listens` for audit. A void row (sql/0008) takes the listen back out of
the bucket aggregates (and, through them, the all-time totals, 0013), so the next publication
no longer counts it. A rebuild recomputes the aggregates from `listens` minus the voids into
fresh tables and swaps them in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from clickhouse_connect.driver.client import Client

from toplist.boards import VOIDABLE
from toplist.boards import board as find_board

log = logging.getLogger(__name__)

VOID_CHUNK = 10_000


@dataclass
class VoidResult:
    requested: int = 0
    voided: int = 0
    already_voided: int = 0
    not_found: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def read_event_ids(lines: Iterable[str]) -> list[str]:
    """One event id per line; blank lines and `#` comments are skipped (`void_events` counts
    a repeated id once)."""
    ids = (line.strip() for line in lines)
    return [event_id for event_id in ids if event_id and not event_id.startswith("#")]


def void_events(
    client: Client, database: str, event_ids: list[str], reason: str, board: str = "charts"
) -> VoidResult:
    """Void the events of `board` with these ids. Idempotent: an id already voided is left as
    it is. Repeated ids count once (`requested` is the number of distinct ids)."""
    if not reason.strip():
        raise ValueError("a void needs a reason (for example 'fraud' or 'test traffic')")
    spec = find_board(board)
    if not spec.voids:
        raise ValueError(
            f"the {spec.name} board has no corrections (boards that do: {', '.join(VOIDABLE)})"
        )
    event_ids = list(dict.fromkeys(event_ids))
    result = VoidResult(requested=len(event_ids))
    # A void row copies what its board's views need of the event (toplist/boards.py
    # `void_copies`); the boards that copy nothing leave the voided ids out in their models.
    columns = ", ".join(["event_id", *spec.void_copies, "reason"])
    values = "".join(f"any({column}), " for column in spec.void_copies)
    for start in range(0, len(event_ids), VOID_CHUNK):
        ids = event_ids[start : start + VOID_CHUNK]
        params = {"ids": ids, "reason": reason}
        found = int(
            client.command(
                f"SELECT uniqExact(event_id) FROM {database}.{spec.raw}"
                " WHERE event_id IN {ids:Array(String)}",
                parameters=params,
            )
        )
        already = int(
            client.command(
                f"SELECT uniqExact(event_id) FROM {database}.{spec.voids}"
                " WHERE event_id IN {ids:Array(String)}",
                parameters=params,
            )
        )
        client.command(
            f"""
            INSERT INTO {database}.{spec.voids} ({columns})
            SELECT event_id, {values}{{reason:String}}
            FROM {database}.{spec.raw}
            WHERE event_id IN {{ids:Array(String)}}
              AND event_id NOT IN (
                  SELECT event_id FROM {database}.{spec.voids}
                  WHERE event_id IN {{ids:Array(String)}}
              )
            GROUP BY event_id
            """,
            parameters=params,
        )
        result.already_voided += already
        result.voided += found - already
        result.not_found += len(ids) - found
    return result


def _counted(database: str, where: str) -> str:
    """What `listens_by_10m` must hold for the events matching `where`: raw minus voids,
    leaving out the events that arrived beyond the late horizon (flagged on arrival, 0011).

    The one definition of a correct aggregate, shared by the rebuild and the recount. `where`
    may use event_time (both `listens` and `listen_voids` have it) and query parameters.
    """
    return f"""
        SELECT
            toplist_bucket_start(counted.event_time) AS bucket_start,
            counted.country AS country,
            counted.song_id AS song_id,
            toInt64(count()) AS listens
        FROM (
            SELECT event_id, song_id, country, event_time
            FROM {database}.listens FINAL
            WHERE ({where}) AND NOT beyond_horizon
        ) AS counted
        LEFT ANTI JOIN (
            SELECT DISTINCT event_id FROM {database}.listen_voids WHERE {where}
        ) AS voided ON counted.event_id = voided.event_id
        GROUP BY bucket_start, country, song_id
    """


# The sums of the buckets that views on listens_by_10m keep (sql/0013, 0030, 0032): each table,
# its key columns, and those keys as a bucket row gives them. A rebuild sums them again from the
# rebuilt buckets; a recount makes the keys a repaired batch touched equal to their buckets.
ROLLUPS = (
    ("listens_total", "country, song_id", "country, song_id"),
    (
        "listens_by_day",
        "day, country, song_id",
        "toStartOfDay(bucket_start) AS day, country, song_id",
    ),
    (
        "listens_by_week",
        "week, country, song_id",
        "toDateTime(toMonday(bucket_start), 'UTC') AS week, country, song_id",
    ),
)


def recount_buckets(client: Client, database: str, event_ids: str, parameters: dict) -> None:
    """Make the buckets holding these events (an SQL subquery of ids) equal to raw minus voids,
    then the sums of their buckets (ROLLUPS: the songs' all-time totals, days and weeks) equal
    to what the buckets hold.

    Inserts the differences, so the aggregates stay readable throughout and a recount that is
    repeated changes nothing. Used to repair a batch that a crash left half applied (a crash
    can also fall between a bucket and its sums, all written by one insert); it assumes no
    other writer adds to those buckets meanwhile.
    """
    buckets = f"""
        SELECT DISTINCT toplist_bucket_start(event_time) FROM {database}.listens
        WHERE event_id IN ({event_ids})
    """
    in_buckets = f"toplist_bucket_start(event_time) IN ({buckets})"
    _make_equal(
        client,
        f"{database}.listens_by_10m",
        "bucket_start, country, song_id",
        truth=_counted(database, in_buckets),
        held_where=f"bucket_start IN ({buckets})",
        parameters=parameters,
    )
    for table, keys, from_bucket in ROLLUPS:
        touched = f"""
            SELECT DISTINCT {from_bucket} FROM (
                SELECT toplist_bucket_start(event_time) AS bucket_start, country, song_id
                FROM {database}.listens WHERE event_id IN ({event_ids})
            )
        """
        _make_equal(
            client,
            f"{database}.{table}",
            keys,
            truth=f"""
                SELECT {keys}, sum(listens) AS listens FROM (
                    SELECT {from_bucket}, finalizeAggregation(listens) AS listens
                    FROM {database}.listens_by_10m
                )
                WHERE ({keys}) IN ({touched}) GROUP BY {keys}
            """,
            held_where=f"({keys}) IN ({touched})",
            parameters=parameters,
        )


def _make_equal(
    client: Client, table: str, keys: str, truth: str, held_where: str, parameters: dict
) -> None:
    """Insert into the sum aggregate `table` what it lacks, key by key, to hold `truth` (a
    query of `keys` and `listens`) wherever `held_where` holds."""
    client.command(
        f"""
        INSERT INTO {table} ({keys}, listens)
        SELECT {keys}, sumState(truth.listens - held.listens)
        FROM ({truth}) AS truth
        FULL OUTER JOIN (
            SELECT {keys}, sumMerge(listens) AS listens
            FROM {table}
            WHERE {held_where}
            GROUP BY {keys}
        ) AS held USING ({keys})
        WHERE truth.listens != held.listens
        GROUP BY {keys}
        """,
        parameters=parameters,
    )


def _months(client: Client, database: str, start: datetime | None, end: datetime | None):
    conditions, params = [], {}
    if start is not None:
        conditions.append("t >= {start:DateTime64(3, 'UTC')}")
        params["start"] = start
    if end is not None:
        conditions.append("t < {end:DateTime64(3, 'UTC')}")
        params["end"] = end
    where = " AND ".join(conditions) or "1"
    rows = client.query(
        f"""
        SELECT DISTINCT month FROM (
            SELECT toYYYYMM(event_time) AS month, event_time AS t FROM {database}.listens
            UNION ALL
            SELECT toYYYYMM(bucket_start) AS month, bucket_start AS t
            FROM {database}.listens_by_10m
        )
        WHERE {where}
        ORDER BY month
        """,
        parameters=params,
    ).result_rows
    return [int(month) for (month,) in rows]


@dataclass
class RebuildResult:
    recounted: list[int] = field(default_factory=list)  # months recomputed from raw (YYYYMM)
    copied: list[int] = field(default_factory=list)  # months outside the range, kept as they were
    expired: list[int] = field(default_factory=list)  # in range, but raw may have expired: kept
    rows: int = 0  # bucket rows written for the recounted months
    seconds: float = 0.0


def rebuild_aggregates(
    client: Client,
    database: str,
    start: datetime | None = None,
    end: datetime | None = None,
    progress: Callable[[int, int, int, int], None] | None = None,
    raw_ttl_days: int = 0,
) -> RebuildResult:
    """Recompute `listens_by_10m` from the raw events for [start, end) (default: all), and
    the sums of the buckets (ROLLUPS: `listens_total`, `listens_by_day`, `listens_by_week`) from
    them.

    The new aggregates are built in a fresh table: each month in the range (widened to whole
    months, the table's partitions) is recounted from raw minus voids, every other month is
    copied as it is (hard links, no rewrite). Then one EXCHANGE TABLES swaps the whole table
    atomically, so a reader sees the old aggregates or the new ones, never a mix, and a query
    already running finishes on the old ones. With a raw TTL (`raw_ttl_days`), a month that
    reaches back past the retention horizon may have lost raw events, so it is kept as it is
    rather than recounted short. `progress(done, total, month, rows)` follows each month.

    The sums are taken from the new buckets into fresh tables too and swapped in right after
    them (one EXCHANGE each: a publication that runs between them may rank on old sums; the
    next one is right).

    Run it while ingestion is paused (in embedded mode one process owns the data, so nothing
    else writes): aggregates written between a month's copy and the swap would be lost until
    the next rebuild.
    """
    started = time.monotonic()
    in_range = set(_months(client, database, start, end))
    months = sorted(in_range | set(_months(client, database, None, None)))
    horizon = None
    if raw_ttl_days:
        oldest_kept = datetime.now(UTC) - timedelta(days=raw_ttl_days)
        horizon = oldest_kept.year * 100 + oldest_kept.month  # months before it lost rows
    counted = _counted(database, "toYYYYMM(event_time) = {month:UInt32}")
    tables = ["listens_by_10m", *(table for table, _, _ in ROLLUPS)]
    live = f"{database}.listens_by_10m"
    staging = f"{database}.listens_by_10m_rebuild"
    result = RebuildResult()
    for table in tables:
        client.command(f"DROP TABLE IF EXISTS {database}.{table}_rebuild")
        client.command(f"CREATE TABLE {database}.{table}_rebuild AS {database}.{table}")
    try:
        for done, month in enumerate(months, start=1):
            rows = 0
            if month not in in_range:
                client.command(f"ALTER TABLE {staging} REPLACE PARTITION {month} FROM {live}")
                result.copied.append(month)
            elif horizon is not None and month <= horizon:
                client.command(f"ALTER TABLE {staging} REPLACE PARTITION {month} FROM {live}")
                result.expired.append(month)
            else:
                client.command(
                    f"""
                    INSERT INTO {staging} (bucket_start, country, song_id, listens)
                    SELECT bucket_start, country, song_id, sumState(listens) AS listens
                    FROM ({counted})
                    GROUP BY bucket_start, country, song_id
                    """,
                    parameters={"month": month},
                )
                rows = int(
                    client.command(
                        f"SELECT count() FROM {staging} WHERE toYYYYMM(bucket_start) = {month:d}"
                    )
                )
                result.recounted.append(month)
                result.rows += rows
            if progress:
                progress(done, len(months), month, rows)
        for table, keys, from_bucket in ROLLUPS:
            client.command(
                f"""
                INSERT INTO {database}.{table}_rebuild ({keys}, listens)
                SELECT {from_bucket}, sumMergeState(listens) FROM {staging}
                GROUP BY {keys}
                """
            )
        for table in tables:
            client.command(f"EXCHANGE TABLES {database}.{table} AND {database}.{table}_rebuild")
    finally:
        for table in tables:
            client.command(f"DROP TABLE IF EXISTS {database}.{table}_rebuild")
    result.seconds = time.monotonic() - started
    return result


def rebuild_board(client: Client, database: str, board: str) -> int:
    """Recompute a board's aggregate from its raw events (one whose aggregates a repeated
    event cannot change: toplist/boards.py); returns its rows.

    The aggregate is rebuilt whole, by the query of the very view that fills it (read back
    from the engine, so the rule stays in its migration), into a fresh table swapped in with
    one EXCHANGE TABLES. Those aggregates ignore repeated events, so the raw table's unmerged
    copies change nothing. Pause the board's ingestion while it runs, as for the charts.
    (The sale's sums need no rebuild: they are taken from the raw orders when published.)
    """
    spec = find_board(board)
    if not spec.idempotent_aggregates:
        raise ValueError(
            f"the {board} board's aggregates are rebuilt by month (rebuild_aggregates)"
        )
    ((table, view),) = spec.aggregates
    rows = client.query(
        "SELECT as_select FROM system.tables WHERE database = {db:String} AND name = {view:String}",
        parameters={"db": database, "view": view},
    ).result_rows
    query = rows[0][0] if rows else ""
    if not query:
        raise RuntimeError(f"{database}.{view} is missing: run `toplist migrate` first")
    live, staging = f"{database}.{table}", f"{database}.{table}_rebuild"
    client.command(f"DROP TABLE IF EXISTS {staging}")
    client.command(f"CREATE TABLE {staging} AS {live}")
    try:
        client.command(f"INSERT INTO {staging} {query}")
        rows = int(client.command(f"SELECT count() FROM {staging}"))
        client.command(f"EXCHANGE TABLES {live} AND {staging}")
    finally:
        client.command(f"DROP TABLE IF EXISTS {staging}")
    log.info("rebuilt %s from the raw events (%d rows)", live, rows)
    return rows
