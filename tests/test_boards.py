"""The other boards end to end on the real engine: generated events with the awkward cases
(ingest/board_events.py) go in through the same load path as Kafka, each board is published
through dbt, and what it shows is held to an independent Python reference
(tests/boards_reference.py) and read back through the API."""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from boards_reference import (
    current_listeners,
    distinct_buyers,
    entries,
    listeners_board,
    sale_boards,
    shelf_bucket,
    shelves,
)
from conftest import migrated_before

from api.app import create_app
from ingest.board_events import ItemEventGenerator, OrderGenerator, PlaybackGenerator
from ingest.catalog import load_catalog
from ingest.load import load_lines, repair_unfinished
from publish.publisher import PublishError, publish
from toplist.boards import BOARDS
from toplist.config import POPULAR_WINDOWS
from toplist.corrections import rebuild_board
from toplist.migrate import discover, migrate

NOW = datetime(2026, 12, 4, 12, 0, 30, tzinfo=UTC)


def load(client, db: str, board: str, lines: list[str], chunk: int = 700) -> None:
    """In several batches, so repeats cross batch boundaries."""
    for start in range(0, len(lines), chunk):
        load_lines(client, db, lines[start : start + chunk], board=BOARDS[board])


# -- live listeners ----------------------------------------------------------------------------


def test_awkward_playbacks_count_once_per_user_and_never_negative(client, config):
    def report(user, playback, kind, version, seconds, song="s-a"):
        event = {"user_id": user, "playback_id": playback, "type": kind, "version": version,
                 "event_time": (NOW - timedelta(seconds=seconds)).isoformat()}  # fmt: skip
        if song is not None:
            event["song_id"] = song
        return json.dumps(event)

    lines = [
        report("u1", "p1", "START", 1, 50),  # repeated START
        report("u1", "p1", "START", 1, 50),
        report("u2", "p2", "STOP", 1, 40, song=None),  # the STOP arrives before its START
        report("u2", "p2", "START", 1, 45),
        report("u3", "p3", "START", 1, 60, "s-b"),  # switches song without a STOP
        report("u3", "p4", "START", 1, 30, "s-c"),
        report("u4", "p5", "START", 2, 20, "s-b"),  # a STOP of an older version
        report("u4", "p5", "STOP", 1, 10),
        report("u5", "p6", "STOP", 1, 30),  # stopped, restarted as a newer version
        report("u5", "p6", "START", 2, 25, "s-b"),
        report("u5", "p6", "START", 1, 35, "s-b"),
        report("u6", "p7", "STOP", 3, 5),  # repeated STOPs only
        report("u6", "p7", "STOP", 3, 5),
        report("u7", "p8", "HEARTBEAT", 1, 5, song=None),  # a heartbeat alone opens nothing
        '{"user_id": "u8", "playback_id": "p9", "type": "PAUSE", "version": 1}',
    ]
    random.Random(3).shuffle(lines)
    result = load_lines(client, config.database, lines, board=BOARDS["listeners"])
    assert (result.read, result.rejected) == (len(lines), 1)
    snapshot = publish(client, config, board="listeners", as_of=NOW)
    board = entries(client, config.database, snapshot.snapshot_id)[("global", "listeners", "now")]
    assert [(item, score) for item, score, _ in board] == [("s-b", 2), ("s-a", 1), ("s-c", 1)]
    assert snapshot.stats["users"] == 4 == sum(score for _, score, _ in board)
    dead = client.query(f"SELECT reason FROM {config.database}.playbacks_dead_letters")
    assert dead.result_rows == [("type: must be START, STOP or HEARTBEAT",)]


@pytest.mark.parametrize("expiry", [0, 420])
def test_listeners_match_the_reference_after_a_shuffled_duplicated_stream(client, config, expiry):
    config = replace(config, listeners_expiry_seconds=expiry)
    generated = PlaybackGenerator(seed=17, users=400).history(
        NOW - timedelta(minutes=10), NOW, malformed=5
    )
    load(client, config.database, "listeners", generated.lines)
    truth = current_listeners(generated.events, NOW, expiry)
    assert 100 < len(truth) < 400, "the stream should leave some users listening, not all"

    for attempt in range(2):  # the whole stream delivered again changes nothing
        snapshot = publish(client, config, board="listeners", as_of=NOW)
        board = entries(client, config.database, snapshot.snapshot_id).get(
            ("global", "listeners", "now"), []
        )
        assert [(item, score) for item, score, _ in board] == listeners_board(truth)
        assert all(score > 0 for _, score, _ in board), "a count went to zero or below"
        assert sum(score for _, score, _ in board) == snapshot.stats["users"] == len(truth)
        if attempt == 0:
            shuffled = list(generated.lines)
            random.Random(9).shuffle(shuffled)
            load(client, config.database, "listeners", shuffled, chunk=333)


@pytest.mark.parametrize("published_at", ["now", "just before the hour turned"])
def test_listeners_count_only_the_retentions_reports_and_its_ttl_drops_the_rest(
    client, config, published_at
):
    """The retention (sql/0019) at the present time, as the TTL works on the wall clock; and
    for a publication whose as_of was the hour's last second, its merges run after the turn."""
    config = replace(config, listeners_retention_hours=2)
    migrate(client, config)  # as `toplist migrate` with TOPLIST_LISTENERS_RETENTION_HOURS=2
    db = config.database
    as_of = datetime.now(UTC).replace(microsecond=0)
    if published_at != "now":
        as_of = as_of.replace(minute=0, second=0) - timedelta(seconds=1)
    generator = PlaybackGenerator(seed=23, users=300)
    reports = []
    for hours_ago in (6, 3):  # one history out of the retention, one across its edge
        generated = generator.history(as_of - timedelta(hours=hours_ago), as_of)
        load(client, db, "listeners", generated.lines)
        reports += generated.events
    truth = current_listeners(reports, as_of, retention_hours=2)
    everything = current_listeners(reports, as_of)
    assert truth and truth != everything, "the retention should leave out some listeners"

    def published() -> list[tuple[str, int]]:
        snapshot = publish(client, config, board="listeners", as_of=as_of)
        board = entries(client, db, snapshot.snapshot_id).get(("global", "listeners", "now"), [])
        assert sum(score for _, score, _ in board) == snapshot.stats["users"] == len(truth)
        return [(item, score) for item, score, _ in board]

    assert published() == listeners_board(truth)
    ddl = client.command(f"SHOW CREATE TABLE {db}.playbacks")
    assert "TTL hour + toIntervalHour(4)" in ddl, ddl  # the retention, its hour, one of margin
    hour = as_of.replace(minute=0, second=0)
    dropped, margin = hour - timedelta(hours=4), hour - timedelta(hours=3)
    assert min(r["event_time"] for r in reports) < dropped, "some reports should expire"
    client.command(f"OPTIMIZE TABLE {db}.playbacks FINAL")  # a merge applies the TTL (any
    # merge may: the loads' own merges can have dropped rows before this one)
    turned = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) > hour
    kept, old, margins = client.query(
        f"SELECT count(), countIf(hour <= {{dropped:DateTime('UTC')}}),"
        f" countIf(hour = {{margin:DateTime('UTC')}}) FROM {db}.playbacks",
        parameters={"dropped": dropped, "margin": margin},
    ).result_rows[0]
    assert kept and not old
    assert margins or turned, "the hour of margin goes only once the hour has turned"
    # Whether or not the hour turned since as_of, the publication at as_of finds its hours.
    assert published() == listeners_board(truth), "the TTL dropped only what no longer counts"

    migrate(client, replace(config, listeners_retention_hours=0))
    assert "TTL" not in client.command(f"SHOW CREATE TABLE {db}.playbacks")


# -- flash sale --------------------------------------------------------------------------------


def test_sale_boards_rank_exact_sums_and_approximate_distinct_buyers(client, config):
    generated = OrderGenerator(seed=23, products=40, buyers=3_000).orders(
        6_000, NOW - timedelta(hours=1), NOW, malformed=4, retry_fraction=0.1
    )
    # Two products tied on units, to hold the tie policy: the smaller id (bytewise) first.
    tie = [
        {"event_id": f"tie-{p}", "order_id": f"tie-{p}", "product_id": p, "buyer_id": "b-tie",
         "units": 50_000, "amount_cents": 1, "event_time": NOW.isoformat()}
        for p in ("tie-b", "tie-B")
    ]  # fmt: skip
    lines = generated.lines + [json.dumps(order) for order in tie]
    load(client, config.database, "sale", lines)
    orders = [*generated.events, *tie]
    snapshot = publish(client, config, board="sale", as_of=NOW)
    boards = entries(client, config.database, snapshot.snapshot_id)
    truth = sale_boards(orders)
    products = boards[("products", "units", "all")]
    assert [(item, score) for item, score, _ in products] == truth["products"]
    assert [item for item, _, _ in products[:2]] == ["tie-B", "tie-b"]
    buyers = boards[("buyers", "spend_cents", "all")]
    assert [(item, score) for item, score, _ in buyers] == truth["buyers"]
    unique = {order["event_id"]: order for order in orders}
    assert snapshot.stats["orders"] == len(unique)
    assert snapshot.stats["spend_cents"] == sum(o["amount_cents"] for o in unique.values())

    per_product, total = distinct_buyers(orders)
    for item, _, extra in products:  # within uniqCombined's documented error (~0.3%): 1%
        assert abs(extra["distinct_buyers"] - per_product[item]) <= 0.01 * per_product[item] + 1
    assert abs(snapshot.stats["distinct_buyers"] - total) <= 0.01 * total + 1

    api = create_app(config).test_client()
    top = api.get("/v1/sale/products?k=3").get_json()
    assert [row["product_id"] for row in top["items"]] == [p for p, _ in truth["products"][:3]]
    assert (
        top["totals"]["orders"] == len(unique)
        and "uniqCombined" in (top["totals"]["distinct_buyers_error"])
    )
    name, units = truth["products"][5]
    one = api.get(f"/v1/sale/products/{name}").get_json()
    assert (one["rank"], one["units"]) == (6, units)
    buyer, spend = truth["buyers"][0]
    assert api.get(f"/v1/sale/buyers/{buyer}").get_json()["spend_cents"] == spend
    missing = api.get("/v1/sale/buyers/nobody")
    assert missing.status_code == 404
    assert missing.get_json()["error"]["code"] == "buyer_not_ranked"
    assert api.get("/v1/sale/products?k=0").status_code == 400


# -- marketplace popular items ---------------------------------------------------------------


def test_shelves_match_the_reference_and_hide_what_the_catalog_hides(client, config):
    generator = ItemEventGenerator(seed=29)
    generated = generator.events(6_000, NOW - timedelta(hours=30), NOW, malformed=3)
    load(client, config.database, "popular", generated.lines)
    catalog = generator.catalog()
    assert load_catalog(client, config.database, [json.dumps(r) for r in catalog]).loaded

    snapshot = publish(client, config, board="popular", as_of=NOW + timedelta(seconds=9))
    as_of = shelf_bucket(NOW + timedelta(seconds=9))
    assert snapshot.as_of == as_of == NOW, "a shelf's as_of is aligned down to 10 seconds"
    truth = shelves(generated.events, as_of)
    published = entries(client, config.database, snapshot.snapshot_id)
    assert {shelf: [(i, s) for i, s, _ in rows] for shelf, rows in published.items()} == truth
    assert {window for _, _, window in truth} == set(POPULAR_WINDOWS)
    # The last 30 seconds count in the 1m window: a minute's events need not wait for its end.
    assert any(NOW - timedelta(seconds=30) <= e["event_time"] < NOW for e in generated.events)

    hidden = {r["item_id"] for r in catalog if not r["available"] or r["deleted"]}
    api = create_app(config).test_client()
    for scope, metric, window in [
        ("global", "views", "1d"),
        ("city:sf", "orders", "1h"),
        ("restaurant:r01", "views", "1h"),
    ]:
        shelf = api.get(f"/v1/topk?scope={scope}&metric={metric}&window={window}&k=10")
        body = shelf.get_json()
        expected = [(i, s) for i, s in truth[(scope, metric, window)] if i not in hidden][:10]
        assert [(row["item_id"], row[metric]) for row in body["items"]] == expected
        assert [row["rank"] for row in body["items"]] == list(range(1, len(expected) + 1))
        if scope == "global":  # hidden items ranked among the first ten, and still ten shown
            assert len(expected) == 10 and body["hidden"] > 0

    # An item taken off the catalog vanishes at once, without a new publication.
    top = api.get("/v1/topk?scope=global&metric=views&window=1d&k=3").get_json()["items"][0]
    off = {**next(r for r in catalog if r["item_id"] == top["item_id"]), "available": False}
    load_catalog(client, config.database, [json.dumps(off)])
    after = api.get("/v1/topk?scope=global&metric=views&window=1d&k=3").get_json()
    assert top["item_id"] not in [row["item_id"] for row in after["items"]]
    assert len(after["items"]) == 3 and after["hidden"] >= 1

    for bad, code in [
        ("scope=town:x", "invalid_scope"),
        ("metric=likes", "invalid_metric"),
        ("window=1w", "invalid_window"),
        ("k=101", "invalid_k"),
    ]:
        answer = api.get(f"/v1/topk?{bad}")
        assert answer.status_code == 400 and answer.get_json()["error"]["code"] == code


def test_shelves_counted_by_the_minute_upgrade_to_10_second_buckets(tmp_path):
    """A database whose shelves were counted per minute (migrations up to 0028) is migrated to
    10-second buckets (0029) from its raw events: the shelves equal the reference's, and the
    events that arrive after the upgrade count too."""
    with migrated_before(29, tmp_path) as (client, config):
        generator = ItemEventGenerator(seed=31)
        old = generator.events(3_000, NOW - timedelta(days=3), NOW - timedelta(minutes=5))
        load(client, config.database, "popular", old.lines)
        upgrade = [m.version for m in discover() if m.version >= 29]
        assert [m.version for m in migrate(client, config)] == upgrade
        new = generator.events(500, NOW - timedelta(minutes=5), NOW)
        load(client, config.database, "popular", new.lines)
        snapshot = publish(client, config, board="popular", as_of=NOW)
        published = entries(client, config.database, snapshot.snapshot_id)
        truth = shelves(old.events + new.events, NOW)
        assert {shelf: [(i, s) for i, s, _ in rows] for shelf, rows in published.items()} == truth


def test_views_count_once_per_user_item_and_ten_minutes(client, config):
    def view(n, user, minute, second=0):
        return json.dumps({"event_id": f"v{n}", "item_id": "dish", "restaurant_id": "r1",
                           "city_id": "sf", "type": "view", "user_id": user,
                           "event_time": f"2026-12-04T11:{minute:02d}:{second:02d}Z"})  # fmt: skip

    lines = [
        view(1, "ann", 1), view(2, "ann", 4), view(3, "ann", 9, 59),  # one bucket: once
        view(4, "ann", 10), view(4, "ann", 10),  # the next bucket; a redelivery
        view(5, "bob", 59, 30),  # the last minute only
    ]  # fmt: skip
    load_lines(client, config.database, lines, board=BOARDS["popular"])
    snapshot = publish(
        client, config, board="popular", as_of=datetime(2026, 12, 4, 12, 0, 10, tzinfo=UTC)
    )
    shelf = entries(client, config.database, snapshot.snapshot_id)
    assert [(i, s) for i, s, _ in shelf[("global", "views", "1h")]] == [("dish", 3)]
    assert [(i, s) for i, s, _ in shelf[("restaurant:r1", "views", "1m")]] == [("dish", 1)]


# -- shared machinery ----------------------------------------------------------------------------


def test_a_cut_off_board_batch_is_repaired_and_counted_once(client, config):
    """A batch stored and never recorded as done (a crash inside the insert chain) is undone
    and applied again; the board comes out as if nothing had happened."""
    db = config.database
    generated = OrderGenerator(seed=41).orders(1_000, NOW - timedelta(hours=1), NOW, malformed=2)
    half = len(generated.lines) // 2
    load(client, db, "sale", generated.lines[:half])
    batch_id = uuid.uuid4()
    cut = generated.lines[half:]
    client.insert(
        f"{db}.orders_incoming_log",
        [[line, "load", batch_id] for line in cut],
        column_names=["raw_message", "_source", "_batch_id"],
    )
    # The crash: some of the batch reached the raw orders and its dead letters, no more.
    client.command(
        f"""
        INSERT INTO {db}.orders_incoming (raw_message, _source, _batch_id)
        SELECT raw_message, _source, _batch_id FROM {db}.orders_incoming_log
        WHERE _batch_id = {{id:UUID}} LIMIT 200
        """,
        parameters={"id": batch_id},
    )
    assert repair_unfinished(client, db, board=BOARDS["sale"]) == [batch_id]
    assert repair_unfinished(client, db, board=BOARDS["sale"]) == []
    snapshot = publish(client, config, board="sale", as_of=NOW)
    boards = entries(client, db, snapshot.snapshot_id)
    truth = sale_boards(generated.events)
    assert [(i, s) for i, s, _ in boards[("products", "units", "all")]] == truth["products"]
    dead = int(client.command(f"SELECT count() FROM {db}.orders_dead_letters"))
    assert dead == generated.malformed, "a repaired batch's dead letters were kept twice"


def test_a_failed_board_publication_keeps_the_last_snapshot(client, config):
    load_lines(
        client,
        config.database,
        PlaybackGenerator(seed=2, users=30).history(NOW - timedelta(minutes=5), NOW).lines,
        board=BOARDS["listeners"],
    )
    api = create_app(config).test_client()
    assert api.get("/v1/listeners").status_code == 503
    good = publish(client, config, board="listeners", as_of=NOW)

    def fail(_snapshot_id: str) -> None:
        raise RuntimeError("the disk filled up")

    with pytest.raises(RuntimeError):
        publish(client, config, board="listeners", as_of=NOW, before_commit=fail)
    broken = replace(config, dbt_profiles_dir=config.dbt_profiles_dir / "missing")
    with pytest.raises(PublishError):
        publish(client, broken, board="listeners", as_of=NOW)
    answer = api.get("/v1/listeners?k=2").get_json()
    assert answer["snapshot_id"] == good.snapshot_id and len(answer["items"]) == 2
    left = int(client.command(f"SELECT count() FROM {config.database}.board_entries"))
    assert left == good.entry_count, "a failed publication left entries behind"


def test_a_board_rebuilt_from_raw_shows_what_its_events_say(client, config):
    """Whatever its aggregate came to hold (here: a playback that no report ever opened, and a
    view no event made), a rebuild from the raw events puts the board right."""
    db = config.database
    playbacks = PlaybackGenerator(seed=19, users=120).history(NOW - timedelta(minutes=5), NOW)
    items = ItemEventGenerator(seed=19)
    events = items.events(1_000, NOW - timedelta(hours=2), NOW)
    load(client, db, "listeners", playbacks.lines)
    load(client, db, "popular", events.lines)
    client.command(
        f"""
        INSERT INTO {db}.playbacks
        SELECT 'ghost', 'p', toStartOfHour(now()), maxState(tuple(toUInt64(9), toUInt8(0))),
            argMaxState('ghost-song', tuple(toUInt8(1), toUInt64(9), now64(3), 'ghost-song')),
            maxState(now64(3)), maxState(now64(3))
        """
    )
    client.command(
        f"""
        INSERT INTO {db}.item_activity_by_10s
        SELECT {{bucket:DateTime('UTC')}}, 'sf', 'r00', 'ghost-item', 'view',
            uniqExactState('someone/never')
        """,
        parameters={"bucket": NOW.replace(second=0) - timedelta(minutes=2)},
    )
    for board in ("listeners", "popular"):
        rebuild_board(client, db, board)
    listeners = publish(client, config, board="listeners", as_of=NOW)
    board = entries(client, db, listeners.snapshot_id)[("global", "listeners", "now")]
    assert [(i, s) for i, s, _ in board] == listeners_board(current_listeners(playbacks.events))
    popular = publish(client, config, board="popular", as_of=NOW)
    published = entries(client, db, popular.snapshot_id)
    truth = shelves(events.events, NOW)
    assert {shelf: [(i, s) for i, s, _ in rows] for shelf, rows in published.items()} == truth
