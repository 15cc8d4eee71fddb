"""kafka-python beside confluent-kafka (librdkafka), on the same topic in the same run.

Usage: python -m bench.kafka_clients [--brokers HOST:PORT] [--messages N] [--runs R]

Without --brokers it starts the development broker (ingest/kafka_broker.py) in a temporary
directory. Each run produces N demo listen lines with each client (acks=all, idempotent)
and consumes them back with each client in a fresh consumer group, reading every field the
embedded consumer reads. Prints medians, the ratio confluent/kafka-python, and the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer
from kafka.admin import KafkaAdminClient, NewTopic

from ingest.generator import ListenGenerator
from ingest.produce import event_key, producer


def produce_kafka_python(brokers: str, topic: str, lines: list[bytes]) -> float:
    kafka = producer(brokers)
    started = time.perf_counter()
    for line in lines:
        kafka.send(topic, value=line, key=event_key(line))
    kafka.flush()
    elapsed = time.perf_counter() - started
    kafka.close()
    return len(lines) / elapsed


def produce_confluent(brokers: str, topic: str, lines: list[bytes]) -> float:
    kafka = Producer(
        {"bootstrap.servers": brokers, "acks": "all", "enable.idempotence": True, "linger.ms": 20}
    )
    started = time.perf_counter()
    for line in lines:
        while True:
            try:
                kafka.produce(topic, line, key=event_key(line))
                break
            except BufferError:
                kafka.poll(0.05)
    kafka.flush()
    return len(lines) / (time.perf_counter() - started)


def consume_kafka_python(brokers: str, topic: str, count: int) -> float:
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=brokers,
        group_id=f"bench-{uuid.uuid4().hex}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_partition_fetch_bytes=8 << 20,
        fetch_max_bytes=64 << 20,
    )
    got, started = 0, None
    while got < count:
        records = consumer.poll(1000, max_records=10_000)
        if started is None and records:
            started = time.perf_counter()
        for batch in records.values():
            for record in batch:
                _ = (record.value, record.topic, record.partition, record.offset, record.timestamp)
                got += 1
    rate = count / (time.perf_counter() - started)
    consumer.close()
    return rate


def consume_confluent(brokers: str, topic: str, count: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": brokers,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got, started = 0, None
    while got < count:
        messages = consumer.consume(10_000, 1.0)
        if started is None and messages:
            started = time.perf_counter()
        for message in messages:
            _ = (
                message.value(),
                message.topic(),
                message.partition(),
                message.offset(),
                message.timestamp(),
            )
        got += len(messages)
    rate = count / (time.perf_counter() - started)
    consumer.close()
    return rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kafka_clients", description=__doc__)
    parser.add_argument("--brokers", help="an existing broker (default: start one)")
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, default=Path("bench/kafka_clients.json"))
    args = parser.parse_args(argv)

    broker = None
    brokers = args.brokers
    if not brokers:
        from ingest.kafka_broker import start_broker

        broker = start_broker(Path(tempfile.mkdtemp(prefix="toplist-bench-")) / "kafka")
        brokers = broker.bootstrap
    now = datetime.now(UTC)
    batch = ListenGenerator(seed=1).batch(args.messages, now - timedelta(days=1), now)
    lines = [line.encode() for line in batch.lines]
    results: dict[str, list[float]] = {
        name: []
        for name in (
            "produce kafka-python",
            "produce confluent-kafka",
            "consume kafka-python",
            "consume confluent-kafka",
        )
    }
    admin = KafkaAdminClient(bootstrap_servers=brokers)
    try:
        for run in range(args.runs):
            topics = [f"bench-{uuid.uuid4().hex[:8]}-{side}" for side in ("kp", "ck")]
            admin.create_topics(
                [NewTopic(t, num_partitions=4, replication_factor=1) for t in topics]
            )
            results["produce kafka-python"].append(produce_kafka_python(brokers, topics[0], lines))
            results["produce confluent-kafka"].append(produce_confluent(brokers, topics[1], lines))
            # Both consumers read the same topic, alternating who goes first.
            order = [consume_kafka_python, consume_confluent]
            if run % 2:
                order.reverse()
            for consume in order:
                name = "kafka-python" if consume is consume_kafka_python else "confluent-kafka"
                results[f"consume {name}"].append(consume(brokers, topics[1], len(lines)))
            print(f"run {run + 1}/{args.runs} done", flush=True)
    finally:
        admin.close()
        if broker:
            broker.stop()
    medians = {name: statistics.median(values) for name, values in results.items()}
    report = {
        "cores": os.cpu_count(),
        "messages": args.messages,
        "runs": args.runs,
        "median_messages_per_second": {k: round(v) for k, v in medians.items()},
        "ratio_confluent_over_kafka_python": {
            step: round(medians[f"{step} confluent-kafka"] / medians[f"{step} kafka-python"], 2)
            for step in ("produce", "consume")
        },
    }
    print(
        f"{'step':<26}{'median msg/s':>14}   (cores {report['cores']}, {args.messages:,}"
        f" messages, {args.runs} runs)"
    )
    for name, value in medians.items():
        print(f"{name:<26}{value:>14,.0f}")
    for step, ratio in report["ratio_confluent_over_kafka_python"].items():
        print(f"{step}: confluent-kafka / kafka-python = {ratio:.2f}x")
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
