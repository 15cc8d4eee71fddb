"""Helpers for the tests that run against the real Kafka broker."""

from __future__ import annotations

import time
from collections.abc import Callable

from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic


def create_topic(bootstrap: str, topic: str, partitions: int = 4) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    finally:
        admin.close()


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def received(client, database: str, source: str = "kafka") -> int:
    return int(
        client.command(
            f"SELECT sum(received) FROM {database}.ingest_batches WHERE _source = '{source}'"
        )
        or 0
    )


def uncommitted(bootstrap: str, group: str, topic: str) -> int:
    """Messages of `topic` past the offsets `group` has committed (all of them if none)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    reader = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        committed = admin.list_group_offsets({group: None}).get(group, {})
        partitions = reader.partitions_for_topic(topic) or set()
        ends = reader.end_offsets([TopicPartition(topic, p) for p in partitions])
        return sum(
            end - (committed[tp].offset if tp in committed else 0) for tp, end in ends.items()
        )
    finally:
        reader.close()
        admin.close()
