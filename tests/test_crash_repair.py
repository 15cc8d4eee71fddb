"""A batch cut off half way (the process killed inside the insert chain) is repaired exactly.

ClickHouse commits each table of the chain behind listens_incoming on its own, so a kill can
leave any subset of them written. Here the two worst subsets are made by hand, on the real
engine, exactly as a crash leaves them: the batch stored in listens_incoming_log and not
recorded as done, and only some of the chain's tables holding its rows.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from reference import assert_boards_equal, boards, published_boards, totals_mismatch

from ingest.generator import ListenGenerator
from ingest.load import load_lines, repair_unfinished
from publish.publisher import publish
from toplist.corrections import ROLLUPS

AS_OF = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _store_unfinished(client, database: str, lines: list[str]) -> uuid.UUID:
    """Step 1 of a write (the batch stored), with no step 3 (never recorded as done)."""
    batch_id = uuid.uuid4()
    client.insert(
        f"{database}.listens_incoming_log",
        [[line, "load", batch_id] for line in lines],
        column_names=["raw_message", "_source", "_batch_id"],
    )
    return batch_id


def _count(client, sql: str) -> int:
    return int(client.query(sql).result_rows[0][0])


def test_half_applied_batches_are_undone_and_applied_again(client, config):
    db = config.database
    generator = ListenGenerator(seed=31, songs=40)
    history = generator.batch(2_000, AS_OF - timedelta(days=3), AS_OF)
    load_lines(client, db, history.lines)
    # The two cut-off batches re-send some history and carry malformed messages.
    cut = [
        generator.batch(
            600,
            AS_OF - timedelta(days=3),
            AS_OF,
            retry_fraction=0.2,
            retry_from=history.listens,
            malformed=3,
        )
        for _ in range(2)
    ]
    counted_twice = _store_unfinished(client, db, cut[0].lines)
    lost = _store_unfinished(client, db, cut[1].lines)
    # Crash 1: the aggregates' view committed (every new event +1), nothing else did; a plain
    # re-send would count these events twice.
    rows = [(x.event_time, x.country, x.song_id) for x in cut[0].listens]
    as_buckets = """
        SELECT toplist_bucket_start(row.1) AS bucket_start, row.2 AS country, row.3 AS song_id
        FROM (SELECT arrayJoin({rows:Array(Tuple(DateTime64(3, 'UTC'), String, String))}) AS row)
    """
    client.command(
        f"""
        INSERT INTO {db}.listens_by_10m (bucket_start, country, song_id, listens)
        SELECT bucket_start, country, song_id, sumState(toInt64(1)) FROM ({as_buckets})
        GROUP BY ALL
        """,
        parameters={"rows": rows},
    )
    # ... and of those, the sums of the buckets (fed from them in the same insert: the
    # all-time totals, the days, the weeks) took only some: a crash can fall between a bucket
    # and its sums.
    for first, (table, keys, from_bucket) in zip((0, 25, 50), ROLLUPS, strict=True):
        client.command(
            f"""
            INSERT INTO {db}.{table} ({keys}, listens)
            SELECT {from_bucket}, sumState(toInt64(-1)) FROM ({as_buckets})
            GROUP BY ALL
            """,
            parameters={"rows": rows[first : first + 50]},
        )
    # Crash 2: listen_ids committed, `listens` did not; a plain re-send would drop these
    # events as duplicates of themselves.
    client.insert(
        f"{db}.listen_ids", [[x.event_id] for x in cut[1].listens], column_names=["event_id"]
    )
    client.insert(
        f"{db}.listens_dead_letters",
        [["half written", "not a JSON object", "load", counted_twice]],
        column_names=["raw_message", "reason", "_source", "_batch_id"],
    )

    assert repair_unfinished(client, db) == [counted_twice, lost]
    assert repair_unfinished(client, db) == [], "a repaired batch was repaired again"
    # The user sends both cut-off files again, and more: all of it is counted once.
    later = generator.batch(800, AS_OF - timedelta(days=3), AS_OF, malformed=2)
    for batch in (*cut, later):
        load_lines(client, db, batch.lines)

    everything = [*history.listens, *cut[0].listens, *cut[1].listens, *later.listens]
    distinct = len({x.event_id for x in everything})
    snapshot = publish(client, config, AS_OF)
    assert_boards_equal(
        published_boards(client, db, snapshot.snapshot_id), boards(everything, AS_OF)
    )
    assert totals_mismatch(client, db) == [], "the sums differ from their buckets"
    assert _count(client, f"SELECT count() FROM {db}.listens") == distinct
    assert _count(client, f"SELECT count() FROM {db}.listen_ids") == distinct
    assert _count(client, f"SELECT sum(accepted) FROM {db}.ingest_batches") == distinct
    # The cut-off batches' dead letters once each (from the repair), plus the re-sends' own.
    dead = _count(client, f"SELECT count() FROM {db}.listens_dead_letters")
    assert dead == 2 * (cut[0].malformed + cut[1].malformed) + later.malformed
    repaired = _count(
        client, f"SELECT countDistinct(_batch_id) FROM {db}.listens_incoming_done WHERE repaired"
    )
    assert repaired == 2
