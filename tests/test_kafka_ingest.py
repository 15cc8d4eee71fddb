"""The Kafka path on the real broker and the real engine: produce -> consume -> charts."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta

import pytest
from kafka_support import create_topic, received, wait_for
from reference import align, assert_boards_equal, boards, published_boards
from test_pipeline import AS_OF

from ingest.consumer import KafkaIngest
from ingest.generator import MALFORMED_LINES, ListenGenerator
from ingest.produce import event_key, produce_lines
from publish.publisher import publish
from toplist.engine import connect

ALIGNED = align(AS_OF)


def kafka_config(config, bootstrap: str, **overrides):
    """This test's own topic and consumer group on the shared broker."""
    return replace(
        config,
        kafka_brokers=bootstrap,
        kafka_topic=f"listens-{config.database}",
        kafka_group=f"toplist-{config.database}",
        kafka_batch_rows=overrides.pop("kafka_batch_rows", 2_000),
        kafka_batch_seconds=overrides.pop("kafka_batch_seconds", 0.3),
        kafka_bulk_batch_seconds=overrides.pop("kafka_bulk_batch_seconds", 0.3),
        **overrides,
    )


def test_produced_events_are_charted_exactly_once_and_bad_messages_dead_lettered(
    client, config, kafka_bootstrap
):
    config = kafka_config(config, kafka_bootstrap)
    create_topic(kafka_bootstrap, config.kafka_topic)
    generator = ListenGenerator(seed=11, songs=200)
    start, end = ALIGNED - timedelta(days=9), ALIGNED + timedelta(hours=1)
    first = generator.batch(5_000, start, end, malformed=len(MALFORMED_LINES))
    # Re-sent duplicates: the producer retried, or an upstream replayed part of the stream.
    second = generator.batch(
        3_000, start, end, retry_fraction=0.2, malformed=4, retry_from=first.listens
    )
    lines = first.lines + second.lines
    sent = produce_lines(config.kafka_brokers, config.kafka_topic, lines)
    assert sent.acked == sent.sent == len(lines), sent.errors
    assert sent.unkeyed == sum(1 for line in lines if event_key(line.encode()) is None)

    ingest = KafkaIngest(config, connect).start()
    try:
        wait_for(lambda: received(client, config.database) == len(lines), 60, "every message")
        wait_for(lambda: sum(ingest.status.lag.values()) == 0 and ingest.status.lag, 10, "lag 0")
    finally:
        ingest.stop()
    assert not ingest.status.running

    db = config.database
    counted = client.command(f"SELECT count() FROM {db}.listens")
    dead = client.query(
        f"SELECT hex(raw_message), reason, _partition, _offset FROM {db}.listens_dead_letters"
    ).result_rows
    duplicates = first.duplicates + second.duplicates
    assert counted == len(first.listens) + len(second.listens), "events lost or double counted"
    assert len(dead) == first.malformed + second.malformed
    assert len(lines) == counted + duplicates + len(dead), "sent != counted + dups + dead"
    malformed_sent = sorted(
        line.encode().hex().upper() for line in lines if line in MALFORMED_LINES
    )
    assert sorted(row[0] for row in dead) == malformed_sent, "a dead letter lost its raw bytes"
    assert all(reason for _, reason, _, _ in dead), "every dead letter says why"
    assert all(partition >= 0 and offset >= 0 for _, _, partition, offset in dead)

    # Every event keeps where it came from; offsets are unique within their partition.
    provenance = client.query(
        f"SELECT uniqExact(_partition), count() = uniqExact(_partition, _offset),"
        f" countIf(_source != 'kafka' OR _topic != {{topic:String}}) FROM {db}.listens",
        parameters={"topic": config.kafka_topic},
    ).result_rows[0]
    assert provenance == (4, True, 0), "events are keyed by event_id across all 4 partitions"

    snapshot = publish(client, config, AS_OF)
    assert_boards_equal(
        published_boards(client, db, snapshot.snapshot_id),
        boards(first.listens + second.listens, ALIGNED),
    )


def test_a_stopped_consumer_resumes_where_it_committed_without_loss_or_double_count(
    client, config, kafka_bootstrap
):
    config = kafka_config(config, kafka_bootstrap, kafka_batch_rows=500)
    create_topic(kafka_bootstrap, config.kafka_topic)
    generator = ListenGenerator(seed=12, songs=100)
    start, end = ALIGNED - timedelta(days=2), ALIGNED
    first = generator.batch(6_000, start, end, malformed=3)
    second = generator.batch(2_000, start, end, retry_fraction=0.1, retry_from=first.listens)
    produce_lines(config.kafka_brokers, config.kafka_topic, first.lines)

    ingest = KafkaIngest(config, connect).start()
    wait_for(lambda: ingest.status.messages >= 1_000, 60, "the consumer to get going")
    ingest.stop()  # mid-stream: part of the topic is still unread
    partial = received(client, config.database)
    assert 1_000 <= partial < len(first.lines), "the stop should have come mid-stream"
    assert partial == ingest.status.messages, "a clean stop writes what it took"

    produce_lines(config.kafka_brokers, config.kafka_topic, second.lines)
    again = KafkaIngest(config, connect).start()
    try:
        total = len(first.lines) + len(second.lines)
        wait_for(lambda: received(client, config.database) >= total, 60, "the rest")
        wait_for(lambda: again.status.lag and sum(again.status.lag.values()) == 0, 10, "lag 0")
    finally:
        again.stop()
    assert received(client, config.database) == total, "a committed message was read twice"
    snapshot = publish(client, config, AS_OF)
    assert_boards_equal(
        published_boards(client, config.database, snapshot.snapshot_id),
        boards(first.listens + second.listens, ALIGNED),
    )


# On a server the consumer repairs only batches five minutes old (writers may be in flight).
@pytest.mark.embedded_only
def test_a_failed_insert_is_retried_from_the_same_offsets(client, config, kafka_bootstrap):
    config = kafka_config(config, kafka_bootstrap)
    create_topic(kafka_bootstrap, config.kafka_topic, partitions=2)
    batch = ListenGenerator(seed=13).batch(1_500, ALIGNED - timedelta(hours=3), ALIGNED)
    produce_lines(config.kafka_brokers, config.kafka_topic, batch.lines)
    # The incoming table is away (e.g. during a migration): inserts fail until it is back.
    db = config.database
    client.command(f"RENAME TABLE {db}.listens_incoming TO {db}.listens_incoming_away")
    ingest = KafkaIngest(config, connect, retry_backoff_seconds=0.2).start()
    try:
        # The first insert fails; each retry (a repair of the stored batch) fails too.
        wait_for(lambda: ingest.status.failed_batches >= 3, 30, "failed inserts and retries")
        assert ingest.status.messages == 0
        assert "repair" in (ingest.status.last_error or "")
        client.command(f"RENAME TABLE {db}.listens_incoming_away TO {db}.listens_incoming")
        wait_for(lambda: received(client, db) == len(batch.lines), 60, "the retried messages")
    finally:
        ingest.stop()
    assert client.command(f"SELECT count() FROM {db}.listens") == len(batch.listens)
    # The batch stored before the failure was finished from the log, not taken twice.
    assert ingest.status.repaired_batches >= 1
    counted = client.command(f"SELECT sumMerge(listens) FROM {db}.listens_by_10m")
    assert counted == len(batch.listens)


def test_produce_reports_a_line_kafka_refuses_and_sends_the_rest(kafka_bootstrap, tmp_path):
    """A line too large for the broker is reported with its number and counted as failed; a
    line nested too deep for a key is sent unkeyed (its dead letter is the engine's to write,
    as `toplist load` does); a blank line is skipped and counted; every other line is sent and
    the summary is printed."""
    from test_cli import toplist

    topic = f"produce-hostile-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_bootstrap, topic, partitions=1)
    good = ListenGenerator(seed=5).batch(20, AS_OF - timedelta(hours=1), AS_OF).lines[:20]
    deep = "[" * 10_000 + "]" * 10_000
    huge = '{"event_id": "' + "x" * 10_000_000 + '"}'
    lines = [*good[:10], "", deep, " \t", huge, *good[10:]]
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    run = toplist(tmp_path, "produce", "--brokers", kafka_bootstrap, "--topic", topic,
                  str(tmp_path / "events.jsonl"))  # fmt: skip
    assert run.returncode == 1, run.stderr[-2000:]
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    summary = run.stdout.strip().splitlines()[-1]
    assert summary.startswith("sent 22 · acknowledged 21 · failed 1 · unsettled 0"), summary
    assert summary.endswith(" · blank 2 (skipped)"), summary
    assert "error: line 14: " in run.stderr and "MessageSizeTooLarge" in run.stderr, run.stderr
