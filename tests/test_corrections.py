"""Voiding events and rebuilding aggregates from the raw events."""

from __future__ import annotations

import zlib
from datetime import UTC, datetime, timedelta

import pytest
from boards_reference import bucket, distinct_buyers, entries, sale_boards, shelves
from reference import aggregates, assert_boards_equal, boards, published_boards, totals_mismatch

from ingest.board_events import ItemEventGenerator, OrderGenerator
from ingest.generator import ListenGenerator
from ingest.load import load_lines
from publish.publisher import publish
from toplist.boards import BOARDS
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


NOW = datetime(2026, 12, 4, 12, 0, 30, tzinfo=UTC)


def test_voided_orders_stop_counting_on_the_sale_boards(client, config):
    db = config.database
    generated = OrderGenerator(seed=51, products=25, buyers=400).orders(
        3_000, NOW - timedelta(hours=1), NOW, retry_fraction=0.1
    )
    load_lines(client, db, generated.lines, board=BOARDS["sale"])
    orders = generated.events
    before = publish(client, config, board="sale", as_of=NOW)
    top = entries(client, db, before.snapshot_id)[("products", "units", "all")][0][0]
    # Every order of one buyer of the top product (its distinct buyers drop by one), and a
    # tenth of the others (refunds, test orders), once with a repeat and an unknown id.
    buyer = next(o["buyer_id"] for o in orders if o["product_id"] == top)
    voided = {
        o["event_id"]
        for o in orders
        if o["buyer_id"] == buyer or zlib.crc32(o["event_id"].encode()) % 10 == 0
    }
    result = void_events(
        client, db, [*voided, next(iter(voided)), "no-such-order"], "refund", board="sale"
    )
    assert (result.voided, result.already_voided, result.not_found) == (len(voided), 0, 1)

    snapshot = publish(client, config, board="sale", as_of=NOW)
    assert snapshot.void_count == len(voided)
    kept = [o for o in orders if o["event_id"] not in voided]
    boards, truth = entries(client, db, snapshot.snapshot_id), sale_boards(kept)
    assert [(i, s) for i, s, _ in boards[("products", "units", "all")]] == truth["products"]
    assert [(i, s) for i, s, _ in boards[("buyers", "spend_cents", "all")]] == truth["buyers"]
    unique = {o["event_id"]: o for o in kept}
    assert snapshot.stats["orders"] == len(unique)
    assert snapshot.stats["spend_cents"] == sum(o["amount_cents"] for o in unique.values())
    per_product, total = distinct_buyers(unique.values())
    for item, _, extra in boards[("products", "units", "all")]:  # small sets: exact
        assert extra["distinct_buyers"] == per_product[item], item
    assert snapshot.stats["distinct_buyers"] == total
    assert buyer not in {i for i, _, _ in boards[("buyers", "spend_cents", "all")]}
    raw = int(client.command(f"SELECT uniqExact(event_id) FROM {db}.orders"))
    assert raw == len({o["event_id"] for o in orders}), "voided orders stay in the raw table"
    again = void_events(client, db, list(voided), "refund", board="sale")
    assert (again.voided, again.already_voided) == (0, len(voided))


def test_voided_item_events_stop_counting_on_the_shelves(client, config):
    db = config.database
    generator = ItemEventGenerator(seed=52)
    generated = generator.events(4_000, NOW - timedelta(hours=3), NOW)
    load_lines(client, db, generated.lines, board=BOARDS["popular"])
    events = generated.events
    as_of = NOW  # on 10 seconds: its last half minute counts too
    shelf = shelves(events, as_of)[("global", "views", "1h")]
    # Every event of the item on top of the last hour's views (views and orders alike), and
    # one view of each user in one bucket where that user viewed the item more than once (it
    # still counts once: the other view is there), and some orders elsewhere.
    top_item = shelf[0][0]
    voided = {e["event_id"] for e in events if e["item_id"] == top_item}
    voided |= {
        e["event_id"]
        for e in events
        if e["type"] == "order" and zlib.crc32(e["event_id"].encode()) % 7 == 0
    }
    seen: dict[tuple, str] = {}
    for e in events:
        if e["type"] == "view":
            key = (e["user_id"], e["item_id"], bucket(e["event_time"]))
            if key in seen and seen[key] != e["event_id"]:
                voided.add(seen[key])
            seen.setdefault(key, e["event_id"])
    result = void_events(client, db, sorted(voided), "test traffic", board="popular")
    assert result.voided == len(voided) and result.not_found == 0

    snapshot = publish(client, config, board="popular", as_of=NOW)
    kept = [e for e in events if e["event_id"] not in voided]
    published = {
        shelf: [(i, s) for i, s, _ in rows]
        for shelf, rows in entries(client, db, snapshot.snapshot_id).items()
    }
    assert published == shelves(kept, as_of)
    assert top_item not in {i for i, _ in published[("global", "views", "1h")]}
    raw = int(client.command(f"SELECT uniqExact(event_id) FROM {db}.item_events"))
    assert raw == len({e["event_id"] for e in events}), "voided events stay in the raw table"


def test_the_live_listeners_board_has_no_corrections(client, config):
    with pytest.raises(ValueError, match="no corrections"):
        void_events(client, config.database, ["any"], "fraud", board="listeners")
