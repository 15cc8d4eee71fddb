"""The board registry walked whole (toplist/boards.py): every board's tables, models,
publication and answers, and the publication stage's guarantees on every board."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from api.app import create_app
from ingest.board_events import ItemEventGenerator, OrderGenerator, PlaybackGenerator
from ingest.generator import ListenGenerator
from ingest.load import load_lines
from publish import dbt
from publish.lease import LeaseRefused, claim, latest_sql, release, take_term
from publish.publisher import publish
from toplist.boards import BOARDS
from toplist.engine import connect
from toplist.snapshots import ENTRIES, current_snapshot, read_snapshot_id, snapshot_path

NOW = datetime(2026, 12, 4, 12, 0, 30, tzinfo=UTC)


def _events(board: str) -> list[str]:
    start, end = NOW - timedelta(minutes=30), NOW - timedelta(seconds=1)
    if board == "charts":
        return ListenGenerator(seed=51).batch(500, start, end).lines
    if board == "listeners":
        return PlaybackGenerator(seed=52, users=50).history(start, end).lines
    if board == "sale":
        return OrderGenerator(seed=53).orders(300, start, end).lines
    return ItemEventGenerator(seed=54).events(300, start, end).lines


def _tables(client, database: str) -> set[str]:
    rows = client.query(
        "SELECT name FROM system.tables WHERE database = {db:String}", parameters={"db": database}
    ).result_rows
    return {name for (name,) in rows}


def test_every_board_of_the_registry_is_built_published_and_served(client, config):
    db = config.database
    tables = _tables(client, db)
    manifest = dbt.invoke(config, ["parse"], quiet=True)
    models = {node.name for node in manifest.nodes.values() if node.resource_type == "model"}
    app = create_app(config)
    api = app.test_client()
    try:
        for name, board in BOARDS.items():
            missing = set(board.tables) - tables
            assert not missing, f"{name}: `toplist migrate` did not create {sorted(missing)}"
            for view in (view for _, view in board.aggregates):
                assert view in tables, f"{name}: no view fills its aggregate ({view})"
            assert {board.rankings, board.summary} <= models, f"{name}: its dbt models are gone"
            result = load_lines(client, db, _events(name), board=board)
            assert result.accepted > 0, f"{name}: nothing of its demo events was accepted"
            snapshot = publish(client, config, NOW, board=name)
            assert snapshot.entry_count > 0, f"{name}: a publication left its snapshot empty"
            assert current_snapshot(client, db, name) == snapshot
            health = api.get("/healthz").get_json()["boards"][name]
            assert health["snapshot_id"] == snapshot.snapshot_id, f"{name}: /healthz missed it"
        metrics = api.get("/metrics").get_data(as_text=True)
        for name in BOARDS:
            assert f'toplist_snapshot_entries{{board="{name}"}}' in metrics, name
            assert f'toplist_dead_letters{{board="{name}"}}' in metrics, name
        for path in ("/v1/charts/global", "/v1/listeners", "/v1/sale/products", "/v1/topk"):
            assert api.get(path).status_code == 200, path
    finally:
        app.extensions["toplist"].close()


@pytest.mark.parametrize("board", list(BOARDS))
def test_a_publication_killed_before_its_registry_row_leaves_nothing_behind(client, config, board):
    """What a publisher killed between its entries and its registry row leaves (entries no
    registry row names) is removed by the board's next publication."""
    db = config.database
    load_lines(client, db, _events(board), board=BOARDS[board])
    publish(client, config, NOW, board=board)  # this process has swept once already
    killed = publish(client, config, NOW, board=board)
    # The kill, as it leaves things: the registry row never written, the lease never released.
    client.command(
        f"DELETE FROM {db}.board_snapshots WHERE snapshot_id = {{id:String}}",
        parameters={"id": killed.snapshot_id},
    )
    term = client.command(
        f"SELECT max(term) FROM {db}.publication_leases WHERE board = {{b:String}}",
        parameters={"b": board},
    )
    take_term(client, db, board, int(term) + 1, "killed-host:1:dead")
    left = f"SELECT count() FROM {db}.{ENTRIES} WHERE snapshot_id = {{id:String}}"
    assert client.command(left, parameters={"id": killed.snapshot_id}) > 0
    publish(client, config, NOW, board=board)
    assert client.command(left, parameters={"id": killed.snapshot_id}) == 0, (
        f"{board}: the entries of a killed publication were left behind"
    )


def test_two_publishers_of_one_board_never_interleave(client, config):
    """The lease, as on a server where several processes may publish: of two claims of one
    term exactly one wins, a held lease refuses a second publisher, a released one does not,
    and each board has its own."""
    server = replace(config, clickhouse_url="http://clickhouse:8123")  # several processes
    term = claim(client, server, "charts", holder="host-a:1:aa").term
    with pytest.raises(LeaseRefused, match="host-a:1:aa"):
        claim(client, server, "charts", holder="host-b:2:bb")
    assert claim(client, server, "sale", holder="host-b:2:bb")  # another board's lease
    # Two claims of the same term, racing: the deduplication token keeps the first only.
    release(client, server, "charts", term, holder="host-a:1:aa")
    assert take_term(client, config.database, "charts", term + 1, "host-c:3:cc") == term + 1
    with pytest.raises(LeaseRefused, match="host-c:3:cc began publishing"):
        take_term(client, config.database, "charts", term + 1, "host-b:2:bb")
    # Embedded, no other process can be alive: a claim left by another one is a dead one's.
    assert publish(client, config, NOW).board == "charts"


@pytest.mark.parametrize("board", list(BOARDS))
def test_the_lease_reads_its_latest_term_only_however_long_its_history(client, config, board):
    """A live board claims up to two terms a second and keeps a week of them (the TTL);
    finding the latest term summed them all, 0.12 s of every publication after a week
    (bench/README.md). It reads the latest term's rows only, and the lease still holds."""
    db = config.database
    client.command(
        f"""
        INSERT INTO {db}.publication_leases (board, term, kind, holder)
        SELECT {{board:String}}, number + 1, arrayJoin(['claim', 'release']), 'host-a:1:aa'
        FROM numbers(300000)
        """,
        parameters={"board": board},
    )
    server = replace(config, clickhouse_url="http://clickhouse:8123")  # several processes
    assert claim(client, server, board, holder="host-b:2:bb").term == 300_001
    with pytest.raises(LeaseRefused, match="host-b:2:bb"):
        claim(client, server, board, holder="host-c:3:cc")
    plan = "\n".join(
        row[0]
        for row in client.query(
            f"EXPLAIN indexes = 1 {latest_sql(db)}", parameters={"board": board}
        ).result_rows
    )
    granules = [(int(a), int(b)) for a, b in re.findall(r"Granules: (\d+)/(\d+)", plan)]
    assert granules and max(total for _, total in granules) > 50, plan
    assert all(read <= 2 for read, _ in granules), f"the whole history is read:\n{plan}"


@pytest.mark.parametrize("board", list(BOARDS))
def test_two_threads_publishing_one_board_take_turns_and_the_file_holds_the_last(
    client, config, tmp_path, board
):
    """In one process every claim names the same holder: the scheduled publication and a
    requested one (or a rebuild job) must still take turns, or they would share the board's
    model tables and the older snapshot's file could be written last (seen in CI: a worker
    kept serving the older of two snapshots published 18 ms apart)."""
    config = replace(config, snapshot_dir=tmp_path)
    load_lines(client, config.database, _events(board), board=BOARDS[board])
    inside, overlapped = [0], []
    guard = threading.Lock()

    def slow_commit(_snapshot_id: str) -> None:
        with guard:
            inside[0] += 1
            overlapped.append(inside[0] > 1)
        time.sleep(0.5)
        with guard:
            inside[0] -= 1

    threads = [
        threading.Thread(
            target=publish,
            args=(client if n == 0 else connect(config), config, NOW),
            kwargs={"board": board, "before_commit": slow_commit},
        )
        for n in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert overlapped == [False, False], "two publications of one board were inside at once"
    current = current_snapshot(client, config.database, board)
    assert read_snapshot_id(snapshot_path(config.snapshot_files, board)) == current.snapshot_id


def test_a_correction_asks_the_publisher_and_says_when_none_answers(client, config):
    """The API never publishes: with no publisher running, "publish": true records the voids
    and the request, waits, and says so (no 500, no snapshot made by the API)."""
    load_lines(client, config.database, _events("charts"))
    publish(client, config, NOW)
    app = create_app(replace(config, internal_token="t", publish_wait_seconds=0.5))
    try:
        answer = app.test_client().post(
            "/internal/corrections",
            json={"event_ids": ["nope"], "reason": "fraud", "publish": True},
            headers={"Authorization": "Bearer t"},
        )
    finally:
        app.extensions["toplist"].close()
    assert answer.status_code == 200
    body = answer.get_json()
    assert (body["requested"], body["not_found"], body["snapshot"]) == (1, 1, None)
    assert "publisher published none" in body["publish_error"]
    requests = client.command(f"SELECT count() FROM {config.database}.publication_requests")
    assert requests == 1, "the request for a publication was not recorded"
