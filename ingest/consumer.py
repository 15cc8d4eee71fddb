"""The embedded Kafka consumer: the listens topic into `listens_incoming`, at least once.

chDB cannot run ClickHouse's Kafka engine, so in embedded mode this thread does its job: it
reads the topic with a consumer group and writes each message whole (raw bytes plus
`_topic`, `_partition`, `_offset`, `_timestamp`) into the same incoming table that the Kafka
engine feeds in server mode and `toplist load` writes to. Nothing is parsed here; the SQL
behind the incoming table validates, dedups and dead-letters (sql/0002..0004).

Delivery: offsets are committed only after ClickHouse has accepted the batch that holds them.
Commits are asynchronous (a synchronous commit blocks for as long as the broker is away, and
the consumer must keep serving the client's callbacks to notice and report that); a failed
commit puts its offsets back to be committed again, and a clean stop waits a bounded time for
the last one.
Each batch is written all or nothing (`ingest.load.write_batch`): a batch a crash cut off is
repaired before the consumer takes anything (`repair_configured`), and the offsets each applied
batch covers are recorded beside it, so messages redelivered after a crash between the write
and the commit are skipped rather than applied again. (Were they applied again, the exact
dedup on event_id would keep the counts right, but a malformed message would be
dead-lettered twice.)

Batching and back-pressure: messages are gathered until `kafka_batch_rows` or the board's batch
time (`Config.batch_seconds`: 0.5 s for the live boards, 2 s for the others), then handed to a
writer thread, which inserts them while the next batch is gathered; one batch is written at a
time, in order, and the next is handed over only when the one before is written, and
librdkafka's prefetch queue is bounded (`queued.max.messages.kbytes`), so memory stays bounded
(two batches) however far behind the consumer is: the backlog waits in Kafka. A failed insert
rewinds the batch's partitions (and those of the batch gathered since, which is dropped) to
their first offsets, repairs what the failure left, and retries with backoff; nothing is
skipped.

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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from clickhouse_connect.driver.client import Client
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, TopicPartition

from ingest.load import applied_offsets, repair_configured, write_batch
from toplist.boards import BOARDS, CHARTS, Board
from toplist.config import Config, ConfigError

log = logging.getLogger(__name__)

SOURCE = "kafka"
_LAG_EVERY_SECONDS = 2.0
_PROBE_SECONDS = 1.0
# The errors a broker that answers again has ended (what a failed insert left stays until the
# next batch is written).
_BROKER_ERRORS = ("client:", "consume:", "lag:", "commit")
_CLOSE_WAIT_SECONDS = 10.0  # a clean stop waits this long for its last commit


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
    repaired_batches: int = 0
    lag: dict[tuple[str, int], int] = field(default_factory=dict)
    last_error: str | None = None
    last_batch_at: float | None = None
    # Whether the brokers answered the last probe (every few seconds); None before the first.
    # While they do not, the lag cannot be known: `known_lag` is None then.
    reachable: bool | None = None

    @property
    def known_lag(self) -> int | None:
        return sum(self.lag.values()) if self.reachable else None


def instance_id(config: Config, board: Board = CHARTS) -> str:
    """One stable group member per host, data directory (one process owns a directory) and
    board."""
    owner = f"{socket.gethostname()}|{config.clickhouse_url}|{config.database}"
    if board.group_suffix:  # the charts' id predates the other boards
        owner += f"|{board.name}"
    return f"toplist-{hashlib.sha1(owner.encode()).hexdigest()[:16]}"


class KafkaIngest:
    """Consume a board's topic (`config.topic(board)`) into its incoming table on a
    background thread; by default the charts' listens."""

    def __init__(
        self,
        config: Config,
        connect: Callable[[Config], Client],
        *,
        retry_backoff_seconds: float = 0.5,
        client_options: dict[str, object] | None = None,
        board: Board = CHARTS,
        on_written: Callable[[str], None] | None = None,
    ) -> None:
        if not config.kafka_brokers:
            raise ValueError("TOPLIST_KAFKA_BROKERS is not set: there is no Kafka to consume")
        self.config = config
        self.board = board
        # Told the board's name as each batch is in the engine (the publisher's cue to publish
        # a board that publishes on arrival), from the writer thread.
        self._on_written = on_written
        self.topic = config.topic(board.name)
        self._batch_seconds = config.batch_seconds(board.name)
        self.group = config.group(board.name)
        self._connect = connect
        self._backoff = retry_backoff_seconds
        self._options = {
            "bootstrap.servers": config.kafka_brokers,
            "group.id": self.group,
            # Static membership: a restarted process (even after kill -9) takes its partitions
            # back at once instead of waiting out the session timeout of its dead self.
            "group.instance.id": instance_id(config, board),
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "queued.max.messages.kbytes": 65536,
            "fetch.max.bytes": 32 * 1024 * 1024,
            "max.poll.interval.ms": 300_000,
            "error_cb": self._on_client_error,
            "on_commit": self._on_commit,
            **(client_options or {}),
        }
        self.status = ConsumerStatus()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._uncommitted: dict[tuple[str, int], int] = {}
        self._committed: dict[tuple[str, int], int] = {}
        self._in_flight: dict[tuple[str, int], int] = {}  # sent, not yet acknowledged
        self._next_commit = 0.0  # after a failed commit, not before this (monotonic)
        # Per partition, the offset up to which batches are applied (listens_incoming_done).
        self._applied: dict[tuple[str, int], int] = {}
        self._needs_repair = True
        # The batch the writer thread is inserting, with what the insert will return.
        self._writing: tuple[_Batch, Future] | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> KafkaIngest:
        self._stop.clear()
        name = f"kafka-ingest{self.board.group_suffix}"
        self._thread = threading.Thread(target=self.run, name=name, daemon=True)
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
        writer = ThreadPoolExecutor(1, thread_name_prefix=f"kafka-write{self.board.group_suffix}")
        batch = _Batch()

        def on_revoke(_consumer, _partitions) -> None:
            # Write and commit what we hold before the partitions move to another member.
            nonlocal batch
            batch = self._flush(writer, client, consumer, batch, wait=True)

        def on_assign(_consumer, _partitions) -> None:
            # Another member may have applied more of these partitions since we last looked.
            self._needs_repair = True

        consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
        self.status.running = True
        log.info(
            "consuming %s from %s as group %s", self.topic, self.config.kafka_brokers, self.group
        )
        next_lag = 0.0
        try:
            while not self._stop.is_set():
                if self._needs_repair:
                    # Nothing may be written while a repair looks for unfinished batches.
                    if not self._settle(consumer, wait=True, taken=batch):
                        batch = _Batch()
                    if not self._repair(client):
                        self._stop.wait(self._backoff)
                        continue
                room = self.config.kafka_batch_rows - len(batch)
                wait = 0.2  # no longer than the batch has left before it is due
                if batch:
                    due_in = batch.started + self._batch_seconds - time.monotonic()
                    wait = min(wait, max(0.0, due_in))
                for message in consumer.consume(num_messages=min(room, 10_000), timeout=wait):
                    error = message.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            self._record_error(f"consume: {error}")
                    elif not self._already_applied(message):
                        batch.add(message)
                if not self._settle(consumer, wait=False, taken=batch):
                    batch = _Batch()
                full = len(batch) >= self.config.kafka_batch_rows
                due = batch and time.monotonic() - batch.started >= self._batch_seconds
                if full or due:
                    batch = self._flush(writer, client, consumer, batch)
                elif self._uncommitted and time.monotonic() >= self._next_commit:
                    self._commit(consumer)
                if time.monotonic() >= next_lag:
                    self._update_lag(consumer)
                    next_lag = time.monotonic() + _LAG_EVERY_SECONDS
            # A clean stop: what was taken is written and committed before leaving. (If that
            # insert fails, nothing is committed and Kafka redelivers the batch next time.)
            if self._settle(consumer, wait=True, taken=batch) and not self._needs_repair:
                batch = self._flush(writer, client, consumer, batch, wait=True)
            self._commit(consumer)
            self._drain_commits(consumer, _CLOSE_WAIT_SECONDS)
        finally:
            self.status.running = False
            writer.shutdown(wait=True)
            try:
                consumer.close()
            finally:
                client.close()
            log.info("Kafka consumer stopped")

    # -- one batch -------------------------------------------------------------------------

    def _flush(
        self,
        writer: ThreadPoolExecutor,
        client: Client,
        consumer: Consumer,
        batch: _Batch,
        *,
        wait: bool = False,
    ) -> _Batch:
        """Hand the batch to the writer thread once the one before it is written (with
        `wait`, wait for this one too). Returns the batch to gather next."""
        if not self._settle(consumer, wait=True, taken=batch):
            return _Batch()  # the batch before failed: this one was rewound with it
        if len(batch):
            columns = {
                "raw_message": batch.raw,
                "_topic": batch.topics,
                "_partition": batch.partitions,
                "_offset": batch.offsets,
                "_timestamp": batch.timestamps,
                "_source": [SOURCE] * len(batch),
            }
            future = writer.submit(self._write, client, columns)
            self._writing = (batch, future)
        if wait:
            self._settle(consumer, wait=True, taken=_Batch())
        return _Batch()

    def _write(self, client: Client, columns: dict[str, list]) -> None:
        write_batch(client, self.config.database, uuid.uuid4(), columns, self.board)
        if self._on_written is not None:
            try:
                self._on_written(self.board.name)
            except Exception:  # the batch is written: a cue that failed must not undo it
                log.exception("telling the publisher of a written %s batch failed", self.board.name)

    def _settle(self, consumer: Consumer, *, wait: bool, taken: _Batch) -> bool:
        """Account for the batch the writer thread inserted, once it is done (with `wait`,
        wait for it): count it and commit its offsets. When its insert failed, rewind to its
        first offsets and those of `taken` (gathered since: the caller drops it) and ask for a
        repair; returns False then."""
        if self._writing is None:
            return True
        batch, future = self._writing
        if not wait and not future.done():
            return True
        self._writing = None
        try:
            future.result()
        except Exception as error:  # the engine refused: rewind, repair, take them again
            self.status.failed_batches += 1
            self._record_error(f"insert of {len(batch)} messages failed: {error}")
            self._rewind(consumer, taken)
            self._rewind(consumer, batch)  # the earlier offsets where both hold a partition
            self._needs_repair = True
            self._stop.wait(self._backoff)
            return False
        self.status.messages += len(batch)
        self.status.batches += 1
        self.status.last_batch_at = time.time()
        if self.status.last_error and self.status.last_error.startswith(("insert", "repair")):
            self.status.last_error = None  # the engine takes batches again
        for key, offset in batch.next_offsets().items():
            self._uncommitted[key] = max(self._uncommitted.get(key, -1), offset)
            self._applied[key] = max(self._applied.get(key, 0), offset)
        self._commit(consumer)
        return True

    def _repair(self, client: Client) -> bool:
        """Finish any batch a crash or failed insert cut off; learn the applied offsets."""
        try:
            repaired = repair_configured(client, self.config, self.board)
            self._applied = applied_offsets(client, self.config.database, self.topic, self.board)
        except Exception as error:  # the stored batch could not be applied yet: a failed retry
            self.status.failed_batches += 1
            self._record_error(f"repair of unfinished batches failed (will retry): {error}")
            return False
        self.status.repaired_batches += len(repaired)
        self._needs_repair = False
        return True

    def _already_applied(self, message) -> bool:
        """A message an applied batch holds (redelivered because its commit was lost)."""
        key = (message.topic(), message.partition())
        applied = self._applied.get(key, 0)
        if message.offset() >= applied:
            return False
        self._uncommitted[key] = max(self._uncommitted.get(key, -1), applied)
        return True

    def _rewind(self, consumer: Consumer, batch: _Batch) -> None:
        for (topic, partition), offset in batch.first.items():
            try:
                consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException as error:
                # The partition moved to another member; it resumes from the last commit.
                log.info("could not rewind %s[%d]: %s", topic, partition, error)

    def _commit(self, consumer: Consumer) -> None:
        """Send the written offsets to the group coordinator; `_on_commit` hears the answer."""
        if not self._uncommitted:
            return
        offsets = [TopicPartition(t, p, o) for (t, p), o in sorted(self._uncommitted.items())]
        try:
            consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as error:
            self._commit_failed(f"{error}")
            return
        for key, offset in self._uncommitted.items():
            self._in_flight[key] = max(self._in_flight.get(key, -1), offset)
        self._uncommitted.clear()

    def _on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """The coordinator's answer to a commit (served from `consume`, on this thread)."""
        failed: list[tuple[tuple[str, int], int]] = []
        for part in partitions:
            key = (part.topic, part.partition)
            if error is None and part.error is None:
                self._committed[key] = max(self._committed.get(key, -1), part.offset)
            else:
                failed.append((key, part.offset))
            if self._in_flight.get(key, -1) <= part.offset:
                self._in_flight.pop(key, None)
        if not failed:
            return
        reason = error or next(p.error for p in partitions if p.error is not None)
        if reason.code() in (
            KafkaError.UNKNOWN_MEMBER_ID,
            KafkaError.ILLEGAL_GENERATION,
            KafkaError.REBALANCE_IN_PROGRESS,
        ):
            # Those partitions belong to someone else now; they will redeliver and skip.
            self._commit_failed(f"{reason}")
            return
        for key, offset in failed:  # the rows are written: commit them again later
            if offset > self._committed.get(key, -1):
                self._uncommitted[key] = max(self._uncommitted.get(key, -1), offset)
        self._commit_failed(f"{reason}")

    def _commit_failed(self, reason: str) -> None:
        self.status.failed_commits += 1
        self._record_error(f"commit failed (the rows are written; will retry): {reason}")
        self._next_commit = time.monotonic() + self._backoff

    def _drain_commits(self, consumer: Consumer, timeout: float) -> None:
        """On a clean stop, wait up to `timeout` for the last commit's answer (retrying it).

        Messages that arrive meanwhile are not taken: they are not committed, so Kafka gives
        them back next time.
        """
        deadline = time.monotonic() + timeout
        while (self._in_flight or self._uncommitted) and time.monotonic() < deadline:
            if self._uncommitted and time.monotonic() >= self._next_commit:
                self._commit(consumer)
            consumer.poll(0.1)
        if self._in_flight or self._uncommitted:
            log.warning(
                "stopping with offsets not committed (the broker did not answer in %g s);"
                " the messages are written and will be skipped when redelivered",
                timeout,
            )

    # -- observation -----------------------------------------------------------------------

    def _update_lag(self, consumer: Consumer) -> None:
        """Messages in Kafka not yet written and committed here, per assigned partition.

        The high watermark is the one librdkafka caches from each fetch (asking the broker
        costs a round trip per partition); the committed side is what this process committed,
        or, for a partition it has not committed yet, what the group had committed before.
        """
        try:
            # A round trip to the brokers: librdkafka reports a lost broker (error_cb) but not
            # its return, and its cached watermarks go on answering while it is away.
            consumer.list_topics(self.topic, timeout=_PROBE_SECONDS)
        except KafkaException as error:
            self.status.reachable = False
            self._record_error(f"client: brokers unreachable: {error}")
            return
        self.status.reachable = True
        if self.status.last_error and self.status.last_error.startswith(_BROKER_ERRORS):
            log.info("Kafka consumer: the brokers answer again")
            self.status.last_error = None
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
            ("repaired", status.repaired_batches),
        ):
            gauges.append(
                (
                    "toplist_kafka_batches_total",
                    "counter",
                    "Consumer batches by outcome (failed: an insert or a repair attempt that failed"
                    " and is retried; repaired: finished after a crash or a failed insert had"
                    " cut it off).",
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


def start_consumers(
    config: Config,
    connect: Callable[[Config], Client],
    on_written: Callable[[str], None] | None = None,
) -> dict[str, KafkaIngest]:
    """An embedded consumer per board, started (`toplist serve --ingest`, `toplist run`);
    `on_written` is told a board's name as each of its batches is written."""
    if not config.kafka_brokers:
        raise ConfigError("--ingest needs TOPLIST_KAFKA_BROKERS (host:port of the Kafka broker)")
    if not config.embedded:
        raise ConfigError(
            "--ingest is for the embedded engine; in server mode ClickHouse's Kafka engine"
            " consumes the topics (sql/0009, 0018, applied by `toplist migrate`)"
        )
    consumers = {}
    for name, board in BOARDS.items():
        log.info("consuming Kafka topic %s from %s", config.topic(name), config.kafka_brokers)
        consumers[name] = KafkaIngest(config, connect, board=board, on_written=on_written).start()
    return consumers
