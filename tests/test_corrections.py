"""Voiding events and rebuilding aggregates from the raw events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from reference import aggregates, assert_boards_equal, boards, published_boards, totals_mismatch

from ingest.generator import ListenGenerator
from ingest.load import load_lines
from publish.publisher import publish
from toplist.corrections import read_event_ids, rebuild_aggregates, void_events

AS_OF = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_void_removes_events_from_the_next_snapshot_and_is_idempotent(client, config):
    generator = ListenGenerator(seed=9, songs=50)
    batch = generator.batch(3_000, AS_OF - timedelta(days=40), AS_OF)
    load_lines(client, config.database, batch.lines)
    top_song = boards(batch.listens, AS_OF)[("24h", "US")][0][0]
    fraud = [x.event_id for x in batch.listens if x.song_id == top_song and x.country == "US"]
    fraud_file = ["# fraud ring", *fraud, "", fraud[0], "no-such-event"]

    result = void_events(client, config.database, read_event_ids(fraud_file), "fraud")
    assert (result.voided, result.already_voided, result.not_found) == (len(fraud), 0, 1)
    snapshot = publish(client, config, AS_OF)
    assert_boards_equal(
        published_boards(client, config.database, snapshot.snapshot_id),
        boards(batch.listens, AS_OF, voided=frozenset(fraud)),
    )
    raw = client.command(f"SELECT count() FROM {config.database}.listens")
    assert raw == len(batch.listens), "voided events must stay in the raw table for audit"

    before = aggregates(client, config.database)
    again = void_events(client, config.database, fraud, "fraud")
    assert (again.voided, again.already_voided) == (0, len(fraud))
    assert aggregates(client, config.database) == before, "voiding twice changed the counts"


def test_rebuild_from_raw_equals_incremental_aggregates(client, config):
    generator = ListenGenerator(seed=10, songs=80)
    previous = []
    for _ in range(6):  # many batches, with retries across them and events up to 70 days late
        batch = generator.batch(
            1_000, AS_OF - timedelta(days=70), AS_OF, retry_fraction=0.1, retry_from=previous
        )
        load_lines(client, config.database, batch.lines)
        previous = batch.listens
    void_events(client, config.database, [x.event_id for x in previous[:25]], "test traffic")
    incremental = aggregates(client, config.database)
    snapshot = publish(client, config, AS_OF)

    progress = []
    result = rebuild_aggregates(
        client, config.database, progress=lambda done, total, month, rows: progress.append(done)
    )
    months = result.recounted
    assert len(months) >= 3 and progress == list(range(1, len(months) + 1))
    assert aggregates(client, config.database) == incremental, "rebuild differs from incremental"
    rebuilt = publish(client, config, AS_OF)
    assert published_boards(client, config.database, rebuilt.snapshot_id) == published_boards(
        client, config.database, snapshot.snapshot_id
    )

    # A ranged rebuild after the aggregates were damaged repairs just that range.
    client.command(f"TRUNCATE TABLE {config.database}.listens_by_10m")
    rebuild_aggregates(client, config.database, AS_OF - timedelta(days=75), AS_OF)
    assert aggregates(client, config.database) == incremental
    assert totals_mismatch(client, config.database) == [], "rebuilt totals differ from buckets"

    # The swapped-in tables are the ones the views feed: later events and voids reach both.
    later = generator.batch(500, AS_OF - timedelta(days=2), AS_OF)
    load_lines(client, config.database, later.lines)
    void_events(client, config.database, [x.event_id for x in later.listens[:10]], "test traffic")
    total = f"SELECT sumMerge(listens) FROM {config.database}.listens_total"
    assert int(client.command(total)) == sum(n for *_, n in incremental) + 500 - 10
    assert totals_mismatch(client, config.database) == []
