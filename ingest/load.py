"""Writing raw listen messages into `listens_incoming`, the entry every source shares.

Nothing is parsed here: validation, dedup and dead-lettering happen in SQL behind the
incoming table (sql/0002..0004), so a line loaded from a file meets exactly the rules a
Kafka message meets. This module batches lines, reports what became of them, and makes each
batch all or nothing:

1. the batch is stored in `listens_incoming_log` (one insert, one part: all or nothing);
2. the chain behind `listens_incoming` runs from the stored copy (INSERT ... SELECT);
3. the batch is recorded in `listens_incoming_done`, with the Kafka offsets it covers.

ClickHouse commits each table of the chain in step 2 separately, so a process killed during
it can leave the batch half applied (counted in the aggregates and not in `listens`, say).
A stored batch that is not recorded as done is repaired (`repair_unfinished`) when a writer
starts (`toplist load`, `toplist run`, the embedded consumer) and after a failed write: what
the batch left in `listens`, `listen_ids`, the dead letters and the
batch counts is deleted, the batch is applied again from its stored copy, and the buckets its
events fall in are recounted from raw. Repairing is idempotent, so a crash during a repair is
repaired in turn.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import uuid
from array import array
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from typing import BinaryIO

from clickhouse_connect.driver.client import Client

from toplist.boards import CHARTS, Board
from toplist.cluster import render_statement
from toplist.config import Config
from toplist.corrections import recount_buckets
from toplist.engine import lanes, opened_with

log = logging.getLogger(__name__)


INCOMING_COLUMNS = [
    "raw_message",
    "_topic",
    "_partition",
    "_offset",
    "_timestamp",
    "_source",
    "_batch_id",
    "_received_at",
]


@dataclass
class LoadResult:
    """What became of one load: read = accepted + duplicates + rejected + blank; `conflicts`
    are the duplicates whose content differs from the copy that counted (sql/0022); `blank`
    lines (nothing but white space) are skipped, not sent."""

    batch_ids: list[uuid.UUID] = field(default_factory=list)
    read: int = 0
    accepted: int = 0
    rejected: int = 0
    conflicts: int = 0
    blank: int = 0

    @property
    def sent(self) -> int:
        """The lines sent to the engine: every line read but the blank ones."""
        return self.read - self.blank

    @property
    def duplicates(self) -> int:
        return self.sent - self.accepted - self.rejected

    def as_dict(self) -> dict[str, int | str]:
        return {
            "batches": len(self.batch_ids),
            "read": self.read,
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "rejected": self.rejected,
            "conflicts": self.conflicts,
            "blank": self.blank,
        }


def read_lines(stream: BinaryIO) -> Iterator[bytes]:
    """JSON lines as raw bytes (undecoded, so a dead letter keeps exactly what was sent)."""
    for line in stream:
        line = line.rstrip(b"\r\n")
        yield line


def is_blank(line: bytes) -> bool:
    """A line of nothing but JSON white space: no message, so skipped (and counted) by a load
    and by `toplist produce` rather than dead-lettered."""
    return not line.strip(b" \t\r\n")


def _chunks(lines: Iterable[bytes | str], size: int, result: LoadResult) -> Iterator[list[bytes]]:
    """The non-blank lines in lists of at most `size`; every line read is counted in `result`."""
    lines = iter(lines)
    while read := list(islice(lines, size)):
        result.read += len(read)
        try:
            chunk = [line for line in read if not is_blank(line)]
        except TypeError:  # lines given as text
            read = [line.encode() if isinstance(line, str) else line for line in read]
            chunk = [line for line in read if not is_blank(line)]
        result.blank += len(read) - len(chunk)
        if chunk:
            yield chunk


def batch_counts(
    client: Client, database: str, batch_ids: list[uuid.UUID]
) -> tuple[int, int, int, int]:
    """(received, accepted, rejected, conflicts) recorded for these batches by the
    ingest_batches views."""
    row = client.query(
        f"""
        SELECT sum(received), sum(accepted), sum(rejected), sum(conflicts)
        FROM {database}.ingest_batches
        WHERE _batch_id IN {{batch_ids:Array(UUID)}}
        """,
        parameters={"batch_ids": batch_ids},
    ).result_rows[0]
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


def write_batch(
    client: Client,
    database: str,
    batch_id: uuid.UUID,
    columns: dict[str, list],
    board: Board = CHARTS,
) -> None:
    """Store one batch (column name -> values; _batch_id is added), apply it, record it done."""
    _store(client, database, batch_id, columns, board)
    rows, config = len(columns["raw_message"]), opened_with(client)
    parts = rows // config.ingest_lane_rows if config else 1
    # One part: a live board's half-second batch, which goes first; a bigger one (a load, a
    # consumer catching up) runs like the engine's other work.
    _apply(client, database, batch_id, board, parts=max(1, parts), urgent=parts <= 1)
    _record_done(client, database, batch_id, repaired=False, board=board)


def _store(
    client: Client, database: str, batch_id: uuid.UUID, columns: dict[str, list], board: Board
) -> None:
    """Write a batch into the board's log in one insert. Lines from one source, none holding a
    line break (every line a file gives), go to the embedded engine as one file it reads
    itself (LineAsString keeps every byte); the rest column by column through the client."""
    lines, sources = columns["raw_message"], columns.get("_source")
    config = opened_with(client)
    if (
        config is not None
        and config.embedded
        and set(columns) == {"raw_message", "_source"}
        and len(set(sources)) == 1
        and (text := b"\n".join(lines)).count(b"\n") == len(lines) - 1
    ):
        with tempfile.NamedTemporaryFile(prefix="toplist-batch-", suffix=".txt") as file:
            file.write(text + b"\n")
            file.flush()
            client.command(
                f"""
                INSERT INTO {database}.{board.log} (raw_message, _source, _batch_id)
                SELECT line, {{source:String}}, {{batch_id:UUID}}
                FROM file({{path:String}}, LineAsString, 'line String')
                """,
                parameters={"source": sources[0], "batch_id": batch_id, "path": file.name},
            )
        return
    columns = {**columns, "_batch_id": [batch_id] * len(lines)}
    client.insert(
        f"{database}.{board.log}",
        list(columns.values()),
        column_names=list(columns),
        column_oriented=True,
    )


def _apply(
    client: Client,
    database: str,
    batch_id: uuid.UUID,
    board: Board,
    parts: int | None = None,
    urgent: bool = False,
) -> None:
    """Run the chain behind the incoming table on a stored batch, in as many parts side by side
    as the client has lanes (`toplist.engine.lanes`, TOPLIST_INGEST_LANES), `parts` at most.

    A part is the batch's messages whose key (the board's, as the parse view reads it: every
    copy of one event_id has the same) hashes to it, so no event_id is in two parts and the
    parts cannot race on one id set entry; each part reads in stored order with one thread,
    so the first copy of a repeated id in the batch is still the one that counts. The chain's
    views run without short-circuit evaluation: none of their functions can throw, and with
    it each branch of a multiIf is evaluated apart, so the parse views read the same JSON once
    per JSON function instead of once per field (300k listens through the whole chain: 2.9 s
    instead of 4.4 s). Every part is waited for; the first failure is raised after (the batch
    is then not done, and its repair undoes every part). The batches run at
    `Config.thread_priority`: the charts' and shelves' below the live boards', and a live
    board's above the rest only when `urgent` (a batch small enough for one part), so that a
    load or a backlog of them never holds the cores above the API and the merges.
    """
    names = ", ".join(INCOMING_COLUMNS)
    clients = lanes(client)[:parts]
    config = opened_with(client)
    priority = config.thread_priority(board.name, backlog=not urgent) if config else 0
    split = (
        "AND cityHash64(JSONExtractString(raw_message, {key:String})) % {parts:UInt32}"
        " = {part:UInt32}"
        if len(clients) > 1
        else ""
    )
    statement = f"""
        INSERT INTO {database}.{board.incoming} ({names})
        SELECT {names} FROM {database}.{board.log}
        WHERE _batch_id = {{batch_id:UUID}} {split}
        SETTINGS max_threads = 1, short_circuit_function_evaluation = 'disable',
            os_thread_priority = {priority}
        """

    def apply_part(part: int) -> None:
        clients[part].command(
            statement,
            parameters={
                "batch_id": batch_id,
                "key": board.key,
                "parts": len(clients),
                "part": part,
            },
        )

    if len(clients) == 1:
        apply_part(0)
        return
    with ThreadPoolExecutor(len(clients), thread_name_prefix="toplist-lane") as pool:
        futures = [pool.submit(apply_part, part) for part in range(len(clients))]
    for future in futures:
        future.result()


def _record_done(
    client: Client, database: str, batch_id: uuid.UUID, repaired: bool, board: Board
) -> None:
    client.command(
        f"""
        INSERT INTO {database}.{board.done}
            (_batch_id, _topic, _partition, next_offset, repaired)
        SELECT _batch_id, _topic, _partition, max(_offset) + 1, {{repaired:Bool}}
        FROM {database}.{board.log}
        WHERE _batch_id = {{batch_id:UUID}}
        GROUP BY _batch_id, _topic, _partition
        """,
        parameters={"batch_id": batch_id, "repaired": repaired},
    )


def applied_offsets(
    client: Client, database: str, topic: str, board: Board = CHARTS
) -> dict[tuple[str, int], int]:
    """Per partition of `topic`, the offset up to which messages are in applied batches."""
    rows = client.query(
        f"""
        SELECT _partition, max(next_offset) FROM {database}.{board.done}
        WHERE _topic = {{topic:String}}
        GROUP BY _partition
        """,
        parameters={"topic": topic},
    ).result_rows
    return {(topic, int(partition)): int(offset) for partition, offset in rows}


def unfinished_batches(
    client: Client, database: str, older_than_seconds: float = 0, board: Board = CHARTS
) -> list:
    """Stored batches not recorded as done, oldest first (only those stored that long ago)."""
    rows = client.query(
        f"""
        SELECT _batch_id FROM {database}.{board.log}
        WHERE _batch_id NOT IN (SELECT _batch_id FROM {database}.{board.done})
        GROUP BY _batch_id
        HAVING max(_received_at) <= now64(3) - toIntervalMillisecond({{age:UInt64}})
        ORDER BY min(_received_at)
        """,
        parameters={"age": int(older_than_seconds * 1000)},
    ).result_rows
    return [batch_id for (batch_id,) in rows]


def repair_unfinished(
    client: Client,
    database: str,
    older_than_seconds: float = 0,
    board: Board = CHARTS,
    cluster: str = "",
) -> list[uuid.UUID]:
    """Undo and re-apply every batch a crash cut off; returns their ids.

    Only one writer may run it at a time (in embedded mode there is one process). With
    concurrent writers on a server, `older_than_seconds` keeps it off batches still in flight.
    On a cluster (`cluster`, TOPLIST_CLICKHOUSE_CLUSTER) each delete runs on every node's local
    table, as the migrations are rendered (toplist/cluster.py).
    """
    repaired = []
    for batch_id in unfinished_batches(client, database, older_than_seconds, board):
        params = {"batch_id": batch_id}
        ids = (
            f"SELECT JSONExtractString(raw_message, 'event_id')"
            f" FROM {database}.{board.log} WHERE _batch_id = {{batch_id:UUID}}"
        )
        if board.exactly_once:
            raw = f"{database}.{board.raw}"
            undo = [
                f"DELETE FROM {raw} WHERE event_id IN ({ids}) AND _batch_id = {{batch_id:UUID}}",
                # Ids the batch put in the id set without its event reaching the raw table.
                f"DELETE FROM {database}.{board.ids} WHERE event_id IN ({ids}) AND event_id"
                f" NOT IN (SELECT event_id FROM {raw} WHERE event_id IN ({ids}))",
            ]
        else:
            undo = [f"DELETE FROM {database}.{board.raw} WHERE _batch_id = {{batch_id:UUID}}"]
        undo += [
            f"DELETE FROM {database}.{board.dead_letters} WHERE _batch_id = {{batch_id:UUID}}",
            f"DELETE FROM {database}.ingest_batches WHERE _batch_id = {{batch_id:UUID}}",
        ]
        for statement in undo:
            client.command(render_statement(cluster, database, statement), parameters=params)
        _apply(client, database, batch_id, board)
        if not board.idempotent_aggregates:
            recount_buckets(client, database, ids, params)
        _record_done(client, database, batch_id, repaired=True, board=board)
        log.warning("repaired %s batch %s, which a crash had left unfinished", board.name, batch_id)
        repaired.append(batch_id)
    return repaired


def repair_configured(client: Client, config: Config, board: Board = CHARTS) -> list[uuid.UUID]:
    """`repair_unfinished` as the configuration says: its database, how old a batch must be
    before it counts as cut off (none embedded, five minutes on a server) and its cluster."""
    return repair_unfinished(
        client,
        config.database,
        config.repair_after_seconds,
        board,
        cluster=config.clickhouse_cluster,
    )


def load_lines(
    client: Client,
    database: str,
    lines: Iterable[bytes | str],
    *,
    source: str = "load",
    batch_rows: int = 50_000,
    progress: Callable[[int], None] | None = None,
    board: Board = CHARTS,
) -> LoadResult:
    """Insert lines into the incoming table in batches; return the counts of the whole load.

    Each batch is all or nothing (see the module docstring); when this returns, every line is
    either in the raw table, recognised as a duplicate, in the dead-letter table, or blank
    (skipped and counted). A load
    cut off part-way is resumed by loading the same lines again: a batch is identified by its
    lines (`content_batch_id`), so the batches already applied are not applied again (their
    lines count as duplicates, their bad lines as rejected, dead-lettered once). Call
    `repair_unfinished` first when a crash may have cut a batch off (a new process, or after
    a failed write): it reads the whole log, so not before every load.
    """
    result = LoadResult()
    applied_before: list[uuid.UUID] = []
    for number, chunk in enumerate(_chunks(lines, batch_rows, result)):
        batch_id = content_batch_id(board, source, number, chunk)
        if _is_done(client, database, batch_id, board):
            applied_before.append(batch_id)
        else:
            write_batch(
                client,
                database,
                batch_id,
                {"raw_message": chunk, "_source": [source] * len(chunk)},
                board,
            )
            result.batch_ids.append(batch_id)
        if progress:
            progress(result.read)
    if result.batch_ids:
        received, result.accepted, result.rejected, result.conflicts = batch_counts(
            client, database, result.batch_ids
        )
    else:
        received = 0
    if applied_before:
        # Applied by an earlier load (one cut off, say): its lines are duplicates now, and its
        # dead letters are there once already.
        earlier, _, rejected_before, _ = batch_counts(client, database, applied_before)
        received += earlier
        result.rejected += rejected_before
    if received != result.sent:
        raise RuntimeError(
            f"the engine recorded {received} messages for"
            f" {len(result.batch_ids) + len(applied_before)} batches,"
            f" but {result.sent} were sent"
        )
    return result


def content_batch_id(board: Board, source: str, number: int, lines: list[bytes]) -> uuid.UUID:
    """The id of the `number`th batch of a load from `source`, holding `lines`: the same
    lines at the same place make the same id, so a load run again (after a kill, say) finds
    the batches it already applied and applies them no second time: no second dead letter,
    no second count of what was received. The digest covers every line's length and then
    the lines end to end, so two different batches never share the text it digests."""
    digest = hashlib.sha256(f"{board.name}\n{source}\n{number}\n{len(lines)}\n".encode())
    digest.update(array("Q", map(len, lines)).tobytes())
    digest.update(b"".join(lines))
    return uuid.UUID(bytes=digest.digest()[:16], version=4)


def _is_done(client: Client, database: str, batch_id: uuid.UUID, board: Board) -> bool:
    """Whether the batch was applied. A stored batch that was not is one a crash cut off:
    `repair_configured` (which `toplist load` runs first) finishes it, with the
    configuration's age and cluster; writing it again here would store its lines twice."""
    query = "SELECT count() FROM {table} WHERE _batch_id = {{batch_id:UUID}}"
    params = {"batch_id": batch_id}
    if client.command(query.format(table=f"{database}.{board.done}"), parameters=params):
        return True
    if client.command(query.format(table=f"{database}.{board.log}"), parameters=params):
        raise RuntimeError(
            f"{board.name} batch {batch_id} of this load was cut off by a crash and is not"
            " repaired yet: run the repair first (`toplist load` does), then load again"
        )
    return False
