"""`toplist produce`: send JSON-lines events to a board's Kafka topic, durably.

Delivery: acks=all with the idempotent producer (the broker drops a retried batch it already
wrote), unlimited retries within `delivery_timeout_ms`, and a final flush; the counts at the
end say how many messages the broker acknowledged and how many failed.

Keying: by `event_id` (the board's key field, `Stream.key` in ingest/load.py). Event ids are
unique per listen, so the hash partitioner spreads every song's listens evenly across
partitions: a viral song never pins one partition (or the one consumer that owns it), as
keying by song_id would. A re-sent event carries the same key, so it lands on the partition
of its first copy, in order behind it. Playback reports have no event_id and are keyed by
`user_id`, so a user's STARTs and STOPs stay in order on one partition. Lines with no
readable key (malformed ones) are sent without one, spread by the partitioner; they still
reach the dead-letter table, since validation happens only in SQL behind the incoming table.

Messages are sent as the exact bytes of each line, so a dead letter keeps what was sent. A
line the client refuses to send (larger than the broker takes) is counted as failed and
reported with its number, and the lines after it are still sent. A blank line (nothing but
white space) is no message: it is skipped and counted, as `toplist load` does.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kafka import KafkaProducer
from kafka.errors import KafkaError

from ingest.load import is_blank


@dataclass
class ProduceResult:
    sent: int = 0
    acked: int = 0
    failed: int = 0
    unkeyed: int = 0
    blank: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def unsettled(self) -> int:
        """Sent but neither acknowledged nor failed when the flush timed out."""
        return self.sent - self.acked - self.failed

    def as_dict(self) -> dict[str, int]:
        return {
            "sent": self.sent,
            "acked": self.acked,
            "failed": self.failed,
            "unsettled": self.unsettled,
            "unkeyed": self.unkeyed,
            "blank": self.blank,
        }


def event_key(line: bytes, field: str = "event_id") -> bytes | None:
    """The partitioning key of a line: its `field` (event_id unless the board says otherwise),
    or None when it has no readable one."""
    try:
        event = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the decoder goes
        return None
    key = event.get(field) if isinstance(event, dict) else None
    return key.encode() if isinstance(key, str) and key else None


def producer(brokers: str, **options: object) -> KafkaProducer:
    return KafkaProducer(
        bootstrap_servers=brokers.split(","),
        acks="all",
        enable_idempotence=True,
        max_in_flight_requests_per_connection=5,
        linger_ms=20,
        batch_size=256 * 1024,
        delivery_timeout_ms=120_000,
        **options,
    )


def produce_lines(
    brokers: str,
    topic: str,
    lines: Iterable[bytes | str],
    *,
    progress: Callable[[ProduceResult], None] | None = None,
    progress_every: int = 50_000,
    flush_timeout: float = 120.0,
    key_field: str = "event_id",
) -> ProduceResult:
    """Send each line as one message keyed by its `key_field`; return once all are settled."""
    result = ProduceResult()
    lock = threading.Lock()

    def acked(_metadata) -> None:
        with lock:
            result.acked += 1

    def failed(error: Exception | str) -> None:
        with lock:
            result.failed += 1
            if len(result.errors) < 5:
                result.errors.append(str(error))

    kafka = producer(brokers)
    try:
        for number, line in enumerate(lines, start=1):
            value = line.encode() if isinstance(line, str) else line
            if is_blank(value):
                result.blank += 1
                continue
            key = event_key(value, key_field)
            if key is None:
                result.unkeyed += 1
            result.sent += 1
            try:
                future = kafka.send(topic, value=value, key=key)
            except KafkaError as error:  # refused before sending (too large, say): the rest goes
                failed(f"line {number:,}: {error}")
            else:
                future.add_callback(acked).add_errback(failed)
            if progress and result.sent % progress_every == 0:
                progress(result)
        kafka.flush(timeout=flush_timeout)
    finally:
        kafka.close(timeout=10)
    deadline = time.monotonic() + 5
    while result.acked + result.failed < result.sent and time.monotonic() < deadline:
        time.sleep(0.01)  # callbacks run on the producer's I/O thread
    if progress:
        progress(result)
    return result
