"""The rules every board shares (DESIGN.md "Rules every board shares"), held on every board
as a hostile or careless producer would test them: first copy wins, one time rule, numbers
that cannot overflow, and an as_of that cannot be a typo."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_cli import _on_data_dir, toplist

from api.app import create_app
from ingest.board_events import ItemEventGenerator, OrderGenerator, PlaybackGenerator
from ingest.generator import ListenGenerator
from ingest.load import content_batch_id, load_lines, repair_unfinished
from publish.publisher import PublishError, publish
from toplist.boards import BOARDS
from toplist.migrate import migrate

NOW = datetime(2026, 12, 4, 12, 0, 30, tzinfo=UTC)
EARLIER = (NOW - timedelta(minutes=5)).isoformat()


def board_entries(client, db: str, snapshot_id: str) -> dict[tuple[str, str, str], list]:
    rows = client.query(
        f"SELECT scope, metric, window_name, item_id, score, extra FROM {db}.board_entries"
        " WHERE snapshot_id = {id:String} ORDER BY scope, metric, window_name, rank",
        parameters={"id": snapshot_id},
    ).result_rows
    boards: dict[tuple[str, str, str], list] = {}
    for scope, metric, window, item, score, extra in rows:
        boards.setdefault((scope, metric, window), []).append((item, score, dict(extra)))
    return boards


def load(client, db: str, board: str, lines: list[str]):
    result = load_lines(client, db, lines, board=BOARDS[board])
    assert result.read == result.accepted + result.duplicates + result.rejected + result.blank
    assert result.duplicates >= 0, "a load reported more accepted and rejected than it read"
    return result


def order(event_id: str, product: str, units: int, buyer: str = "b1", **fields) -> str:
    event = {"event_id": event_id, "order_id": f"o-{event_id}", "product_id": product,
             "buyer_id": buyer, "units": units, "amount_cents": 100 * units,
             "event_time": EARLIER}  # fmt: skip
    return json.dumps({**event, **fields})


def item_event(event_id: str, item: str, kind: str, user: str = "u1", **fields) -> str:
    event = {"event_id": event_id, "item_id": item, "restaurant_id": "r1", "city_id": "sf",
             "type": kind, "user_id": user, "event_time": EARLIER}  # fmt: skip
    return json.dumps({**event, **fields})


def test_sale_first_copy_wins_within_a_load_across_loads_and_after_merges(client, config):
    db = config.database
    first = load(client, db, "sale", [
        order("e1", "p1", 1, buyer="b1"),
        order("e1", "p2", 50, buyer="b9"),  # the same order re-sent, another product and buyer
        order("e2", "p1", 2, buyer="b2"),
    ])  # fmt: skip
    assert (first.accepted, first.duplicates) == (2, 1)
    second = load(client, db, "sale", [order("e1", "p3", 7, buyer="b7")])
    assert (second.accepted, second.duplicates) == (0, 1)

    def boards():
        snapshot = publish(client, config, board="sale", as_of=NOW)
        entries = board_entries(client, db, snapshot.snapshot_id)
        products = {
            item: (score, extra) for item, score, extra in entries[("products", "units", "all")]
        }
        buyers = {item: score for item, score, _ in entries[("buyers", "spend_cents", "all")]}
        return products, buyers, snapshot.stats

    products, buyers, stats = boards()
    assert {item: score for item, (score, _) in products.items()} == {"p1": 3}, (
        "a later copy of an order changed what the flash sale counts"
    )
    assert products["p1"][1]["distinct_buyers"] == 2, "a re-sent order added a distinct buyer"
    assert buyers == {"b1": 100, "b2": 200}
    assert (stats["orders"], stats["units"], stats["distinct_buyers"]) == (2, 3, 2)

    # What a background merge does: ReplacingMergeTree keeps the last row of a key.
    client.command(f"OPTIMIZE TABLE {db}.orders FINAL")
    assert boards() == (products, buyers, stats), "a merge changed the flash sale's board"


def test_marketplace_counts_an_event_id_once_for_the_item_of_its_first_copy(client, config):
    db = config.database
    result = load(client, db, "popular", [
        item_event("o1", "item-a", "order"),
        item_event("o1", "item-b", "order"),  # one order event_id sent for two items
        item_event("v1", "item-a", "view", user="u2"),
        item_event("v1", "item-c", "view", user="u3"),  # a view re-sent as another item's
    ])  # fmt: skip
    assert (result.accepted, result.duplicates) == (2, 2)
    load(client, db, "popular", [item_event("o1", "item-c", "order")])
    snapshot = publish(client, config, board="popular", as_of=NOW)
    entries = board_entries(client, db, snapshot.snapshot_id)
    for scope in ("global", "city:sf", "restaurant:r1"):
        orders = [(item, score) for item, score, _ in entries[(scope, "orders", "1h")]]
        views = [(item, score) for item, score, _ in entries[(scope, "views", "1h")]]
        assert orders == [("item-a", 1)], f"{scope}: one order event_id counted for several items"
        assert views == [("item-a", 1)], f"{scope}: a re-sent view counted for another item"


def _copy(board: str, event_id: str, variant: int) -> str:
    """A copy of one event: the same `variant` is the same content, another is a conflict."""
    if board == "charts":
        return json.dumps({"event_id": event_id, "song_id": f"s{variant}", "user_id": "u1",
                           "country": "SE", "event_time": EARLIER})  # fmt: skip
    if board == "sale":
        return order(event_id, f"p{variant}", variant)
    return item_event(event_id, f"item-{variant}", "order")


@pytest.mark.parametrize("board", ["charts", "sale", "popular"])
def test_copies_with_other_content_are_counted_as_conflicts_in_metrics(client, config, board):
    """A later copy whose content differs from the copy that counted changes nothing on the
    board and is counted as a conflict; an identical copy is a plain duplicate. Within one load
    and across loads."""
    db = config.database
    first = load(client, db, board, [
        _copy(board, "a", 1), _copy(board, "a", 1), _copy(board, "a", 2), _copy(board, "b", 1),
    ])  # fmt: skip
    assert (first.accepted, first.duplicates, first.conflicts) == (2, 2, 1)
    again = load(client, db, board, [
        _copy(board, "a", 3), _copy(board, "b", 1), _copy(board, "a", 1), _copy(board, "b", 2),
    ])  # fmt: skip
    assert (again.accepted, again.duplicates, again.conflicts) == (0, 4, 2)
    app = create_app(config)
    try:
        metrics = app.test_client().get("/metrics").get_data(as_text=True)
    finally:
        app.extensions["toplist"].close()
    assert (
        f'toplist_ingest_conflicting_copies_total{{board="{board}",source="load"}} 3.0\n' in metrics
    ), f"{board}: /metrics does not count the conflicting copies"


START = ", the start of the times Toplist counts"
END = ", the end of the times Toplist counts"
SECONDS = (
    " looks like epoch seconds: integer times are epoch milliseconds,"
    " from 100000000000 (1973-03-03T09:46:40Z)"
)
BAD_TIMES = {
    "1899-01-01T00:00:00Z": "before 1970-01-01T00:00:00Z" + START,
    "0001-01-01T00:00:00Z": "before 1970-01-01T00:00:00Z" + START,
    -1: "before 1970-01-01T00:00:00Z" + START,
    "2200-01-01T00:00:00Z": "not before 2106-01-01T00:00:00Z" + END,
    "9999-12-31T23:59:59Z": "not before 2106-01-01T00:00:00Z" + END,
    4_291_747_200_000: "not before 2106-01-01T00:00:00Z" + END,  # 2106-01-01 in epoch millis
    18_446_744_073_709_551_615: "not before 2106-01-01T00:00:00Z" + END,
    "2016-12-31T23:59:60Z": "a leap second (second 60), which Toplist's times do not have:"
    " send :59.999 instead",
    "2016-12-31T23:59:60.5+00:00": "a leap second (second 60), which Toplist's times do not"
    " have: send :59.999 instead",
    1_764_600_000: "1764600000" + SECONDS,  # 2025-12-01T14:40:00Z in epoch seconds
    0: "0" + SECONDS,
    99_999_999_999: "99999999999" + SECONDS,
    "2016-12-31T23:59:61Z": "not an RFC 3339 time with offset",
}


def _event(board: str, n: int, event_time) -> str:
    if board == "charts":
        return json.dumps({"event_id": f"l{n}", "song_id": "s1", "user_id": "u1",
                           "country": "SE", "event_time": event_time})  # fmt: skip
    if board == "listeners":
        return json.dumps({"user_id": f"u{n}", "playback_id": f"p{n}", "type": "START",
                           "version": 1, "song_id": "s1", "event_time": event_time})  # fmt: skip
    if board == "sale":
        return order(f"e{n}", "p1", 1, event_time=event_time)
    return item_event(f"i{n}", "item-a", "order", event_time=event_time)


@pytest.mark.parametrize("board", ["charts", "listeners", "sale", "popular"])
def test_one_time_rule_on_every_board(client, config, board):
    db = config.database
    arrival = datetime.now(UTC)
    too_far_ahead = (arrival + timedelta(days=2)).isoformat()
    within = (arrival + timedelta(hours=1)).isoformat()  # a producer's clock running ahead
    times = {
        **BAD_TIMES,
        too_far_ahead: "more than 86400 seconds ahead of its arrival (TOPLIST_MAX_FUTURE_SECONDS)",
    }
    lines = [_event(board, n, moment) for n, moment in enumerate(times)]
    lines += [
        _event(board, 100, "1970-01-01T00:00:00Z"),
        _event(board, 101, within),
        _event(board, 102, 100_000_000_000),  # the first integer time counted
    ]
    result = load(client, db, board, lines)
    assert (result.accepted, result.rejected) == (3, len(times)), (
        f"{board}: the time rule let an event through or refused a good one"
    )
    dead_letters = f"{db}.{BOARDS[board].dead_letters}"
    reasons = dict(client.query(f"SELECT raw_message, reason FROM {dead_letters}").result_rows)
    for line, moment in zip(lines, times, strict=False):
        assert reasons[line] == f"event_time: {times[moment]}", (
            f"{board}: {moment!r} got {reasons[line]!r}"
        )


@pytest.mark.parametrize("board", ["charts", "listeners", "sale", "popular"])
def test_blank_lines_are_skipped_and_counted_on_every_board(client, config, board):
    """A blank line is no message: counted as blank, never a dead letter or a duplicate."""
    lines = ["", _event(board, 1, EARLIER), "   ", "\t\r", _event(board, 2, EARLIER), ""]
    result = load(client, config.database, board, lines)
    assert (result.read, result.blank, result.accepted, result.duplicates) == (6, 4, 2, 0)
    dead = client.command(f"SELECT count() FROM {config.database}.{BOARDS[board].dead_letters}")
    assert (result.rejected, dead) == (0, 0), f"{board}: a blank line was dead-lettered"


def test_the_last_moment_counted_is_just_before_2106(client, config):
    """With the future rule relaxed (TOPLIST_MAX_FUTURE_SECONDS), the range still ends there."""
    relaxed = replace(config, max_future_seconds=10**10)
    migrate(client, relaxed)
    last, first_refused = 4_291_747_199_999, 4_291_747_200_000
    for board in BOARDS:
        result = load(client, config.database, board, [
            _event(board, 1, last), _event(board, 2, "2105-12-31T23:59:59.999Z"),
            _event(board, 3, first_refused), _event(board, 4, "2105-12-31T23:00:00-01:00"),
        ])  # fmt: skip
        assert (result.accepted, result.rejected) == (2, 2), board


def test_order_numbers_beyond_their_bounds_are_dead_letters_and_sums_are_exact(client, config):
    db = config.database
    result = load(client, db, "sale", [
        order("big-1", "p1", 9_223_372_036_854_775_807),
        order("big-2", "p1", 1_000_001),
        order("big-3", "p1", 0),
        order("big-4", "p1", 1, amount_cents=18_446_744_073_709_551_615),
        order("big-5", "p1", 1, amount_cents=10**12 + 1),
        order("big-6", "p1", 1, amount_cents=-1),
        order("big-7", "p1", 1, amount_cents=2.5),
        order("ok-1", "p1", 1_000_000, amount_cents=10**12),
        order("ok-2", "p1", 1_000_000, amount_cents=10**12),
    ])  # fmt: skip
    assert (result.accepted, result.rejected) == (2, 7)
    reasons = sorted(
        r for (r,) in client.query(f"SELECT reason FROM {db}.orders_dead_letters").result_rows
    )
    assert reasons == sorted(
        ["units: must be an integer from 1 to 1000000"] * 3
        + ["amount_cents: must be an integer from 0 to 1000000000000"] * 4
    )
    snapshot = publish(client, config, board="sale", as_of=NOW)
    entries = board_entries(client, db, snapshot.snapshot_id)
    assert [(i, s) for i, s, _ in entries[("products", "units", "all")]] == [("p1", 2_000_000)]
    assert [(i, s) for i, s, _ in entries[("buyers", "spend_cents", "all")]] == [("b1", 2 * 10**12)]


def test_an_as_of_in_the_future_is_refused_and_an_older_one_needs_asking(client, config):
    future = datetime.now(UTC) + timedelta(days=1)
    with pytest.raises(PublishError, match="in the future"):
        publish(client, config, future)
    for board in ("listeners", "sale", "popular"):
        with pytest.raises(PublishError, match="in the future"):
            publish(client, config, board=board, as_of=future)
    assert not client.command(f"SELECT count() FROM {config.database}.board_snapshots")

    current = publish(client, config, NOW)
    with pytest.raises(PublishError, match="older than the current snapshot"):
        publish(client, config, NOW - timedelta(hours=1))
    assert publish(client, config, NOW).as_of == current.as_of, "republishing the same as_of"
    older = publish(client, config, NOW - timedelta(hours=1), allow_older=True)
    assert older.as_of < current.as_of
    publish(client, config, board="sale", as_of=NOW)
    with pytest.raises(PublishError, match="older than the current snapshot"):
        publish(client, config, board="sale", as_of=NOW - timedelta(hours=1))


def test_publish_command_refuses_a_typo_in_as_of_in_one_line(tmp_path):
    typo = toplist(tmp_path, "publish", "--as-of", "2062-12-06T03:00:00Z")
    assert typo.returncode == 1
    lines = typo.stderr.strip().splitlines()
    assert lines[-1].startswith("toplist publish: as_of 2062-12-06T03:00:00Z is in the future")
    assert "Traceback" not in typo.stderr


# -- what a kill leaves behind -------------------------------------------------------------------


def _lines_for(board: str) -> tuple[list[str], int]:
    """A file's worth of a board's events with repeats and malformed lines; (lines, bad)."""
    start, end = NOW - timedelta(hours=1), NOW
    if board == "charts":
        made = ListenGenerator(seed=41).batch(3_000, start, end, malformed=60)
        return made.lines, made.malformed
    if board == "listeners":
        made = PlaybackGenerator(seed=42, users=600).history(start, end, malformed=60)
    elif board == "sale":
        made = OrderGenerator(seed=43).orders(3_000, start, end, malformed=60)
    else:
        made = ItemEventGenerator(seed=44).events(3_000, start, end, malformed=60)
    return made.lines, made.malformed


@pytest.mark.parametrize("board", ["charts", "listeners", "sale", "popular"])
def test_a_load_killed_and_run_again_counts_every_line_once(tmp_path, board):
    lines, bad = _lines_for(board)
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(lines) + "\n")
    env = {
        **os.environ,
        "TOPLIST_CLICKHOUSE_URL": f"chdb://{tmp_path / 'engine'}",
        "TOPLIST_DATABASE": "toplist",
        "TOPLIST_LOAD_BATCH_ROWS": "400",
    }
    load = [sys.executable, "-m", "toplist.cli", "load", "--board", board, str(events)]
    killed = subprocess.Popen(load, stderr=subprocess.PIPE, text=True, env=env)
    for line in killed.stderr:  # killed once its first batches are in
        if "1,200 lines sent" in line:
            break
    killed.kill()
    killed.communicate(timeout=60)

    again = subprocess.run(load, capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    summary = again.stdout.strip().splitlines()[-1]
    read = int(re.search(r"read ([\d,]+)", summary).group(1).replace(",", ""))
    rejected = int(re.search(r"rejected ([\d,]+)", summary).group(1).replace(",", ""))
    assert (read, rejected) == (len(lines), bad), summary

    count = (
        "from toplist.config import Config; from toplist.engine import connect;"
        "c = Config.from_env(); db = connect(c);"
        f"print(db.command('SELECT count() FROM toplist.{BOARDS[board].dead_letters}'),"
        " db.command('SELECT sum(received) FROM toplist.ingest_batches"
        f" WHERE board = \\'{board}\\''))"
    )
    counted = subprocess.run(
        [sys.executable, "-c", count], capture_output=True, text=True, env=env, timeout=120
    )
    dead_letters, received = map(int, counted.stdout.split())
    assert dead_letters == bad, f"{board}: a load run again after a kill dead-lettered twice"
    assert received == len(lines), f"{board}: a load run again after a kill counted lines twice"


@pytest.mark.parametrize("board", ["charts", "listeners", "sale", "popular"])
def test_a_batch_cut_off_is_repaired_before_the_same_lines_load_again(client, config, board):
    """The lines of a batch a crash cut off (stored, never applied) are not stored a second
    time by a load of the same lines: the load says to repair first, and after the repair
    they count once."""
    db, spec = config.database, BOARDS[board]
    lines = _lines_for(board)[0][:300]
    batch_id = content_batch_id(spec, "load", 0, [line.encode() for line in lines])
    client.insert(
        f"{db}.{spec.log}",
        [[line, "load", batch_id] for line in lines],
        column_names=["raw_message", "_source", "_batch_id"],
    )
    with pytest.raises(RuntimeError, match="cut off by a crash"):
        load_lines(client, db, lines, board=spec)
    assert repair_unfinished(client, db, board=spec) == [batch_id]
    again = load(client, db, board, lines)
    stored = client.command(
        f"SELECT count() FROM {db}.{spec.log} WHERE _batch_id = {{id:UUID}}",
        parameters={"id": batch_id},
    )
    assert stored == len(lines), f"{board}: the batch's lines were stored twice"
    assert again.accepted == 0 and again.read == len(lines)


@pytest.mark.parametrize("board", ["charts", "sale", "popular"])
def test_an_id_set_whose_files_were_lost_is_rebuilt_and_nothing_counts_twice(tmp_path, board):
    """The id set lives in files of its own (EmbeddedRocksDB). Deleted, it would let every
    re-sent event count again; the next command rebuilds it from the raw events instead."""
    lines, _ = _lines_for(board)
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(lines) + "\n")
    first = toplist(tmp_path, "load", "--board", board, str(events))
    assert first.returncode == 0, first.stderr[-2000:]
    ids = BOARDS[board].ids
    where = _on_data_dir(tmp_path, ["-c", (
        "from toplist.config import Config; from toplist.engine import connect;"
        f" print(connect(Config.from_env()).command(\"SELECT data_paths[1] FROM system.tables"
        f" WHERE database = 'toplist' AND name = '{ids}'\"))"
    )], None)  # fmt: skip
    assert where.returncode == 0, where.stderr[-2000:]
    store = Path(where.stdout.strip().splitlines()[-1])
    assert store.is_dir() and any(store.iterdir()), f"no files for {ids} at {store}"
    shutil.rmtree(store)

    resent = tmp_path / "resent.jsonl"  # the same events, in other batches
    resent.write_text("\n".join(reversed(lines)) + "\n")
    again = toplist(tmp_path, "load", "--board", board, str(resent))
    assert again.returncode == 0, again.stderr[-2000:]
    assert "accepted 0 " in again.stdout, f"{board}: events counted again: {again.stdout}"
    assert "rebuilding it from the raw events" in again.stderr
