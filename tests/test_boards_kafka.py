"""The other boards' own topics on the real broker: produce -> the board's consumer -> board."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from boards_reference import current_listeners, listeners_board, sale_boards
from kafka_support import create_topic, received, wait_for
from test_boards import entries

from ingest.board_events import OrderGenerator, PlaybackGenerator
from ingest.consumer import KafkaIngest
from ingest.produce import produce_lines
from publish.publisher import publish
from toplist.boards import BOARDS
from toplist.engine import connect

NOW = datetime(2026, 12, 4, 12, 0, 30, tzinfo=UTC)


def test_playbacks_and_orders_on_their_own_topics_reach_their_boards(
    client, config, kafka_bootstrap
):
    db = config.database
    config = replace(
        config,
        kafka_brokers=kafka_bootstrap,
        kafka_group=f"toplist-{db}",
        kafka_topic_listeners=f"playbacks-{db}",
        kafka_topic_sale=f"orders-{db}",
        kafka_batch_rows=500,
        kafka_batch_seconds=0.3,
        kafka_bulk_batch_seconds=0.3,
    )
    playbacks = PlaybackGenerator(seed=13, users=200).history(
        NOW - timedelta(minutes=10), NOW, malformed=3
    )
    orders = OrderGenerator(seed=13).orders(2_000, NOW - timedelta(hours=1), NOW, malformed=2)
    for board, generated in (("listeners", playbacks), ("sale", orders)):
        create_topic(kafka_bootstrap, config.topic(board))
        topic, key = config.topic(board), BOARDS[board].key
        sent = produce_lines(kafka_bootstrap, topic, generated.lines, key_field=key)
        assert sent.acked == len(generated.lines), sent.errors

    # Both consumers at once, one group and member per board (in one process).
    consumers = [
        KafkaIngest(config, connect, board=BOARDS[b]).start() for b in ("listeners", "sale")
    ]
    try:
        total = len(playbacks.lines) + len(orders.lines)
        wait_for(lambda: received(client, db) == total, 90, "every message of both topics")
    finally:
        for consumer in consumers:
            consumer.stop()
    assert {c.group for c in consumers} == {f"toplist-{db}-listeners", f"toplist-{db}-sale"}

    snapshot = publish(client, config, board="listeners", as_of=NOW)
    board = entries(client, db, snapshot.snapshot_id)[("global", "listeners", "now")]
    truth = current_listeners(playbacks.events)
    assert [(item, score) for item, score, _ in board] == listeners_board(truth)
    assert snapshot.stats["users"] == len(truth)
    sale = entries(client, db, publish(client, config, board="sale", as_of=NOW).snapshot_id)
    products = [(item, score) for item, score, _ in sale[("products", "units", "all")]]
    assert products == sale_boards(orders.events)["products"]
    dead = [
        int(client.command(f"SELECT count() FROM {db}.{BOARDS[b].dead_letters}"))
        for b in ("listeners", "sale")
    ]
    assert dead == [playbacks.malformed, orders.malformed]
    kafka_orders = int(
        client.command(
            f"SELECT uniqExact(event_id) FROM {db}.orders WHERE _source = 'kafka' AND _offset >= 0"
        )
    )
    assert kafka_orders == len(orders.events), "every order is kept, with its Kafka offset"
    partitions = client.query(
        f"SELECT uniqExact(_partition), max(p) FROM (SELECT _partition, uniqExact(_partition)"
        f" OVER (PARTITION BY user_id) AS p FROM {db}.playback_reports)"
    ).result_rows[0]
    assert partitions == (4, 1), "keyed by user_id: each user's reports on one partition of 4"
