"""Corrections on the raw events: voiding event ids, and rebuilding aggregates from raw.

Voided events stay in `listens` for audit. A void row (sql/0008) takes the listen back out of
the bucket aggregates, so the next publication no longer counts it. A rebuild recomputes the
aggregates from `listens` minus the voids and swaps them in one partition at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from clickhouse_connect.driver.client import Client

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


def void_events(client: Client, database: str, event_ids: list[str], reason: str) -> VoidResult:
    """Void the events with these ids. Idempotent: an id already voided is left as it is.

    Repeated ids count once (`requested` is the number of distinct ids)."""
    if not reason.strip():
        raise ValueError("a void needs a reason (for example 'fraud' or 'test traffic')")
    event_ids = list(dict.fromkeys(event_ids))
    result = VoidResult(requested=len(event_ids))
    for start in range(0, len(event_ids), VOID_CHUNK):
        ids = event_ids[start : start + VOID_CHUNK]
        params = {"ids": ids, "reason": reason}
        found = int(
            client.command(
                f"SELECT uniqExact(event_id) FROM {database}.listens"
                " WHERE event_id IN {ids:Array(String)}",
                parameters=params,
            )
        )
        already = int(
            client.command(
                f"SELECT uniqExact(event_id) FROM {database}.listen_voids"
                " WHERE event_id IN {ids:Array(String)}",
                parameters=params,
            )
        )
        client.command(
            f"""
            INSERT INTO {database}.listen_voids (event_id, song_id, country, event_time, reason)
            SELECT event_id, any(song_id), any(country), any(event_time), {{reason:String}}
            FROM {database}.listens
            WHERE event_id IN {{ids:Array(String)}}
              AND event_id NOT IN (
                  SELECT event_id FROM {database}.listen_voids
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
    """What `listens_by_10m` must hold for the events matching `where`: raw minus voids.

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
            WHERE {where}
        ) AS counted
        LEFT ANTI JOIN (
            SELECT DISTINCT event_id FROM {database}.listen_voids WHERE {where}
        ) AS voided ON counted.event_id = voided.event_id
        GROUP BY bucket_start, country, song_id
    """


def recount_buckets(client: Client, database: str, event_ids: str, parameters: dict) -> None:
    """Make the buckets holding these events (an SQL subquery of ids) equal to raw minus voids.

    Inserts the difference, so the aggregate stays readable throughout and a recount that is
    repeated changes nothing. Used to repair a batch that a crash left half applied; it
    assumes no other writer adds to those buckets meanwhile.
    """
    buckets = f"""
        SELECT DISTINCT toplist_bucket_start(event_time) FROM {database}.listens
        WHERE event_id IN ({event_ids})
    """
    in_buckets = f"toplist_bucket_start(event_time) IN ({buckets})"
    client.command(
        f"""
        INSERT INTO {database}.listens_by_10m (bucket_start, country, song_id, listens)
        SELECT bucket_start, country, song_id, sumState(truth.listens - held.listens)
        FROM ({_counted(database, in_buckets)}) AS truth
        FULL OUTER JOIN (
            SELECT bucket_start, country, song_id, sumMerge(listens) AS listens
            FROM {database}.listens_by_10m
            WHERE bucket_start IN ({buckets})
            GROUP BY bucket_start, country, song_id
        ) AS held USING (bucket_start, country, song_id)
        WHERE truth.listens != held.listens
        GROUP BY bucket_start, country, song_id
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


def rebuild_aggregates(
    client: Client,
    database: str,
    start: datetime | None = None,
    end: datetime | None = None,
    progress: Callable[[int, int, int], None] | None = None,
) -> list[int]:
    """Recompute `listens_by_10m` from the raw events for [start, end) (default: all).

    The range is widened to whole months, the aggregate's partitions, so that each month is
    swapped in with one atomic REPLACE PARTITION: readers see the old month or the new one,
    never a mix. Run it while ingestion is paused (events that arrive for a month between
    its recount and its swap would be missing from the aggregate until the next rebuild).
    Returns the months rebuilt (YYYYMM).
    """
    months = _months(client, database, start, end)
    counted = _counted(database, "toYYYYMM(event_time) = {month:UInt32}")
    staging = f"{database}.listens_by_10m_rebuild"
    client.command(f"DROP TABLE IF EXISTS {staging}")
    client.command(f"CREATE TABLE {staging} AS {database}.listens_by_10m")
    try:
        for done, month in enumerate(months, start=1):
            client.command(
                f"""
                INSERT INTO {staging} (bucket_start, country, song_id, listens)
                SELECT bucket_start, country, song_id, sumState(listens) AS listens
                FROM ({counted})
                GROUP BY bucket_start, country, song_id
                """,
                parameters={"month": month},
            )
            client.command(
                f"ALTER TABLE {database}.listens_by_10m REPLACE PARTITION {month} FROM {staging}"
            )
            client.command(f"ALTER TABLE {staging} DROP PARTITION {month}")
            if progress:
                progress(done, len(months), month)
    finally:
        client.command(f"DROP TABLE IF EXISTS {staging}")
    return months
