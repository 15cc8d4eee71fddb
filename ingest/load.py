"""Writing raw listen messages into `listens_incoming`, the entry every source shares.

Nothing is parsed here: validation, dedup and dead-lettering happen in SQL behind the
incoming table (sql/0002..0004), so a line loaded from a file meets exactly the rules a
Kafka message meets. This module only batches lines and reports what became of them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from clickhouse_connect.driver.client import Client

INCOMING_COLUMNS = ["raw_message", "_source", "_batch_id"]


@dataclass
class LoadResult:
    """What became of one load: read = accepted + duplicates + rejected."""

    batch_id: uuid.UUID
    read: int = 0
    accepted: int = 0
    rejected: int = 0

    @property
    def duplicates(self) -> int:
        return self.read - self.accepted - self.rejected

    def as_dict(self) -> dict[str, int | str]:
        return {
            "batch_id": str(self.batch_id),
            "read": self.read,
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "rejected": self.rejected,
        }


def read_lines(stream: BinaryIO) -> Iterator[bytes]:
    """JSON lines as raw bytes (undecoded, so a dead letter keeps exactly what was sent)."""
    for line in stream:
        line = line.rstrip(b"\r\n")
        yield line


def _chunks(lines: Iterable[bytes | str], size: int) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for line in lines:
        chunk.append(line.encode() if isinstance(line, str) else line)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def batch_counts(client: Client, database: str, batch_id: uuid.UUID) -> tuple[int, int, int]:
    """(received, accepted, rejected) recorded for one batch by the ingest_batches views."""
    row = client.query(
        f"""
        SELECT sum(received), sum(accepted), sum(rejected)
        FROM {database}.ingest_batches
        WHERE _batch_id = {{batch_id:UUID}}
        """,
        parameters={"batch_id": batch_id},
    ).result_rows[0]
    return int(row[0]), int(row[1]), int(row[2])


def load_lines(
    client: Client,
    database: str,
    lines: Iterable[bytes | str],
    *,
    source: str = "load",
    batch_rows: int = 50_000,
    progress: Callable[[int], None] | None = None,
) -> LoadResult:
    """Insert lines into the incoming table in batches; return the counts of the whole load.

    All batches of one load share a batch id, so the counts cover the whole load. Inserts are
    synchronous: when this returns, every line is either in the raw table, recognised as a
    duplicate, or in the dead-letter table.
    """
    result = LoadResult(batch_id=uuid.uuid4())
    for chunk in _chunks(lines, batch_rows):
        client.insert(
            f"{database}.listens_incoming",
            [[line, source, result.batch_id] for line in chunk],
            column_names=INCOMING_COLUMNS,
        )
        result.read += len(chunk)
        if progress:
            progress(result.read)
    received, result.accepted, result.rejected = batch_counts(client, database, result.batch_id)
    if received != result.read:
        raise RuntimeError(
            f"the engine recorded {received} messages for batch {result.batch_id},"
            f" but {result.read} were sent"
        )
    return result
