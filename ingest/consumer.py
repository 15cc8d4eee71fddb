"""The embedded Kafka consumer: the listens topic into `listens_incoming`, at least once.

chDB cannot run ClickHouse's Kafka engine, so in embedded mode this thread does its job: it
reads the topic with a consumer group and writes each message whole (raw bytes plus
`_topic`, `_partition`, `_offset`, `_timestamp`) into the same incoming table that the Kafka
engine feeds in server mode and `toplist load` writes to. Nothing is parsed here; the SQL
behind the incoming table validates, dedups and dead-letters (sql/0002..0004).

Delivery: offsets are committed only after ClickHouse has accepted the batch that holds them.
A crash between the insert and the commit redelivers that batch, and the exact dedup on
event_id makes the second copy a counted duplicate, so counts stay exactly-once.

Batching and back-pressure: messages are gathered until `kafka_batch_rows` or
`kafka_batch_seconds`, then inserted synchronously; nothing more is taken from the client
until the insert returns, and librdkafka's prefetch queue is bounded
(`queued.max.messages.kbytes`), so memory stays bounded however far behind the consumer is:
the backlog waits in Kafka. A failed insert rewinds the batch's partitions to its first
offsets and retries with backoff; nothing is skipped.

Client: confluent-kafka (librdkafka). Measured beside kafka-python on this machine
(`python -m bench.kafka_clients`), it consumed ~5x as many messages per second (see
bench/README.md), so it is the consumer; kafka-python stays the producer and tooling client.
"""

from __future__ import annotations

import hashlib
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from clickhouse_connect.driver.client import Client
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, TopicPartition

from toplist.config import Config

log = logging.getLogger(__name__)

KAFKA_COLUMNS = [
    "raw_message",
    "_topic",
    "_partition",
    "_offset",
    "_timestamp",
    "_source",
    "_batch_id",
]
SOURCE = "kafka"
_LAG_EVERY_SECONDS = 2.0


@dataclass
class _Batch:
    """Messages taken from Kafka but not yet in ClickHouse, column by column."""

    raw: list[bytes] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int | None] = field(default_factory=list)
    first: dict[tuple[str, int], int] = field(default_factory=dict)
    started: float = 0.0

    def __len__(self) -> int:
        return len(self.raw)

    def add(self, message) -> None:  # a confluent_kafka.Message
        if not self.raw:
            self.started = time.monotonic()
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        kind, millis = message.timestamp()
        self.raw.append(message.value() or b"")
        self.topics.append(topic)
        self.partitions.append(partition)
        self.offsets.append(offset)
        self.timestamps.append(millis if kind != 0 else None)  # 0: TIMESTAMP_NOT_AVAILABLE
        self.first.setdefault((topic, partition), offset)

    def next_offsets(self) -> dict[tuple[str, int], int]:
        """The offset to commit per partition: one past the last message taken."""
        result: dict[tuple[str, int], int] = {}
        for topic, partition, offset in zip(
            self.topics, self.partitions, self.offsets, strict=True
        ):
            result[(topic, partition)] = max(result.get((topic, partition), -1), offset + 1)
        return result


@dataclass
class ConsumerStatus:
    """What `/metrics` and `/healthz` report about the consumer (read from other threads)."""

    running: bool = False
    messages: int = 0
    batches: int = 0
    failed_batches: int = 0
    failed_commits: int = 0
    lag: dict[tuple[str, int], int] = field(default_factory=dict)
    last_error: str | None = None
    last_batch_at: float | None = None


def instance_id(config: Config) -> str:
    """One stable group member per host and data directory (one process owns a directory)."""
    owner = f"{socket.gethostname()}|{config.clickhouse_url}|{config.database}"
    return f"toplist-{hashlib.sha1(owner.encode()).hexdigest()[:16]}"


class KafkaIngest:
    """Consume `config.kafka_topic` into the incoming table on a background thread."""

    def __init__(
        self,
        config: Config,
        connect: Callable[[Config], Client],
        *,
        retry_backoff_seconds: float = 0.5,
        client_options: dict[str, object] | None = None,
    ) -> None:
        if not config.kafka_brokers:
            raise ValueError("TOPLIST_KAFKA_BROKERS is not set: there is no Kafka to consume")
        self.config = config
        self._connect = connect
        self._backoff = retry_backoff_seconds
        self._options = {
            "bootstrap.servers": config.kafka_brokers,
            "group.id": config.kafka_group,
            # Static membership: a restarted process (even after kill -9) takes its partitions
            # back at once instead of waiting out the session timeout of its dead self.
            "group.instance.id": instance_id(config),
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "queued.max.messages.kbytes": 65536,
            "fetch.max.bytes": 32 * 1024 * 1024,
            "max.poll.interval.ms": 300_000,
            "error_cb": self._on_client_error,
            **(client_options or {}),
        }
        self.status = ConsumerStatus()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._uncommitted: dict[tuple[str, int], int] = {}
        self._committed: dict[tuple[str, int], int] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> KafkaIngest:
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name="kafka-ingest", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop taking messages, write and commit what was taken, leave the group."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("the Kafka consumer did not stop within %g s", timeout)
            self._thread = None

    def run(self) -> None:
        client = self._connect(self.config)
        consumer = Consumer(self._options)
        batch = _Batch()

        def on_revoke(_consumer, _partitions) -> None:
            # Write and commit what we hold before the partitions move to another member.
            nonlocal batch
            batch = self._flush(client, consumer, batch)

        consumer.subscribe([self.config.kafka_topic], on_revoke=on_revoke)
        self.status.running = True
        log.info(
            "consuming %s from %s as group %s",
            self.config.kafka_topic,
            self.config.kafka_brokers,
            self.config.kafka_group,
        )
        next_lag = 0.0
        try:
            while not self._stop.is_set():
                room = self.config.kafka_batch_rows - len(batch)
                for message in consumer.consume(num_messages=min(room, 10_000), timeout=0.2):
                    error = message.error()
                    if error is None:
                        batch.add(message)
                    elif error.code() != KafkaError._PARTITION_EOF:
                        self._record_error(f"consume: {error}")
                full = len(batch) >= self.config.kafka_batch_rows
                due = batch and time.monotonic() - batch.started >= self.config.kafka_batch_seconds
                if full or due:
                    batch = self._flush(client, consumer, batch)
                elif self._uncommitted:
                    self._commit(consumer)
                if time.monotonic() >= next_lag:
                    self._update_lag(consumer)
                    next_lag = time.monotonic() + _LAG_EVERY_SECONDS
            # A clean stop: what was taken is written and committed before leaving. (If that
            # insert fails, nothing is committed and Kafka redelivers the batch next time.)
            batch = self._flush(client, consumer, batch)
            if self._uncommitted:
                self._commit(consumer)
        finally:
            self.status.running = False
            try:
                consumer.close()
            finally:
                client.close()
            log.info("Kafka consumer stopped")

    # -- one batch -------------------------------------------------------------------------

    def _flush(self, client: Client, consumer: Consumer, batch: _Batch) -> _Batch:
        """Insert the batch, then commit its offsets. Returns the batch still to write."""
        if not len(batch):
            return batch
        batch_id = uuid.uuid4()
        try:
            client.insert(
                f"{self.config.database}.listens_incoming",
                [
                    batch.raw,
                    batch.topics,
                    batch.partitions,
                    batch.offsets,
                    batch.timestamps,
                    [SOURCE] * len(batch),
                    [batch_id] * len(batch),
                ],
                column_names=KAFKA_COLUMNS,
                column_oriented=True,
            )
        except Exception as error:  # the engine refused: rewind, wait, take them again
            self.status.failed_batches += 1
            self._record_error(f"insert of {len(batch)} messages failed: {error}")
            self._rewind(consumer, batch)
            self._stop.wait(self._backoff)
            return _Batch()
        self.status.messages += len(batch)
        self.status.batches += 1
        self.status.last_batch_at = time.time()
        for key, offset in batch.next_offsets().items():
            self._uncommitted[key] = max(self._uncommitted.get(key, -1), offset)
        self._commit(consumer)
        return _Batch()

    def _rewind(self, consumer: Consumer, batch: _Batch) -> None:
        for (topic, partition), offset in batch.first.items():
            try:
                consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException as error:
                # The partition moved to another member; it resumes from the last commit.
                log.info("could not rewind %s[%d]: %s", topic, partition, error)

    def _commit(self, consumer: Consumer) -> None:
        """Commit written offsets; on failure keep them and try again after the next batch."""
        offsets = [TopicPartition(t, p, o) for (t, p), o in sorted(self._uncommitted.items())]
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as error:
            self.status.failed_commits += 1
            self._record_error(f"commit failed (the rows are written; will retry): {error}")
            if error.args and error.args[0].code() in (
                KafkaError.UNKNOWN_MEMBER_ID,
                KafkaError.ILLEGAL_GENERATION,
                KafkaError.REBALANCE_IN_PROGRESS,
            ):
                # Those partitions belong to someone else now; they will redeliver and dedup.
                self._uncommitted.clear()
            return
        self._committed.update(self._uncommitted)
        self._uncommitted.clear()

    # -- observation -----------------------------------------------------------------------

    def _update_lag(self, consumer: Consumer) -> None:
        """Messages in Kafka not yet written and committed here, per assigned partition.

        The high watermark is the one librdkafka caches from each fetch (asking the broker
        costs a round trip per partition); the committed side is what this process committed,
        or, for a partition it has not committed yet, what the group had committed before.
        """
        try:
            assigned = consumer.assignment()
            unknown = [tp for tp in assigned if (tp.topic, tp.partition) not in self._committed]
            if unknown:
                for part in consumer.committed(unknown, timeout=5):
                    if part.offset != OFFSET_INVALID and part.offset >= 0:
                        self._committed[(part.topic, part.partition)] = part.offset
            lag = {}
            for part in assigned:
                low, high = consumer.get_watermark_offsets(part, cached=True)
                if high < 0:
                    continue  # nothing fetched from this partition yet
                start = self._committed.get((part.topic, part.partition), max(low, 0))
                lag[(part.topic, part.partition)] = max(high - start, 0)
            self.status.lag = lag
        except KafkaException as error:
            self._record_error(f"lag: {error}")

    def _record_error(self, message: str) -> None:
        if message != self.status.last_error:
            log.warning("Kafka consumer: %s", message)
        self.status.last_error = message

    def _on_client_error(self, error: KafkaError) -> None:
        # librdkafka reports lost brokers here and reconnects by itself.
        self._record_error(f"client: {error.str()}")

    def gauges(self) -> list[tuple[str, str, str, dict[str, str], float]]:
        status = self.status
        gauges: list[tuple[str, str, str, dict[str, str], float]] = [
            (
                "toplist_kafka_consumer_up",
                "gauge",
                "1 while the embedded Kafka consumer runs.",
                {},
                1.0 if status.running else 0.0,
            ),
            (
                "toplist_kafka_consumed_messages_total",
                "counter",
                "Kafka messages written to the incoming table by this process.",
                {},
                float(status.messages),
            ),
        ]
        for outcome, value in (
            ("written", status.batches),
            ("failed", status.failed_batches),
        ):
            gauges.append(
                (
                    "toplist_kafka_batches_total",
                    "counter",
                    "Consumer batches by outcome (a failed batch is rewound and retried).",
                    {"outcome": outcome},
                    float(value),
                )
            )
        gauges.append(
            (
                "toplist_kafka_commit_failures_total",
                "counter",
                "Offset commits that failed (their rows were written; redelivery dedups).",
                {},
                float(status.failed_commits),
            )
        )
        for (topic, partition), lag in sorted(status.lag.items()):
            gauges.append(
                (
                    "toplist_kafka_consumer_lag",
                    "gauge",
                    "Messages in the partition not yet written and committed here.",
                    {"topic": topic, "partition": str(partition)},
                    float(lag),
                )
            )
        return gauges
