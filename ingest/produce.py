"""`toplist produce`: send JSON-lines listen events to the Kafka topic, durably.

Delivery: acks=all with the idempotent producer (the broker drops a retried batch it already
wrote), unlimited retries within `delivery_timeout_ms`, and a final flush; the counts at the
end say how many messages the broker acknowledged and how many failed.

Keying: by `event_id`. Event ids are unique per listen, so the hash partitioner spreads every
song's listens evenly across partitions: a viral song never pins one partition (or the one
consumer that owns it), as keying by song_id would. A re-sent event carries the same key, so
it lands on the partition of its first copy, in order behind it. Lines with no readable
event_id (malformed ones) are sent without a key, spread by the partitioner; they still reach
the dead-letter table, since validation happens only in SQL behind the incoming table.

Messages are sent as the exact bytes of each line, so a dead letter keeps what was sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kafka import KafkaProducer


@dataclass
class ProduceResult:
    sent: int = 0
    acked: int = 0
    failed: int = 0
    unkeyed: int = 0
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
        }


def event_key(line: bytes) -> bytes | None:
    """The partitioning key of a line: its event_id, or None when it has no readable one."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    event_id = event.get("event_id") if isinstance(event, dict) else None
    return event_id.encode() if isinstance(event_id, str) and event_id else None


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
) -> ProduceResult:
    """Send each line as one message keyed by its event_id; return once all are settled."""
    result = ProduceResult()
    lock = threading.Lock()

    def acked(_metadata) -> None:
        with lock:
            result.acked += 1

    def failed(error: Exception) -> None:
        with lock:
            result.failed += 1
            if len(result.errors) < 5:
                result.errors.append(str(error))

    kafka = producer(brokers)
    try:
        for line in lines:
            value = line.encode() if isinstance(line, str) else line
            key = event_key(value)
            if key is None:
                result.unkeyed += 1
            kafka.send(topic, value=value, key=key).add_callback(acked).add_errback(failed)
            result.sent += 1
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
