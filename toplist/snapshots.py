"""The snapshot registry: what a published snapshot is, and how to find a board's current one.

Every board, the charts included, publishes into the same two tables (sql/0021):
`board_entries` (its ranked rows, under a snapshot_id) and `board_snapshots` (one row per
publication, written last). Readers follow registry rows only, so a snapshot is seen whole or
not at all. The publication stage (publish/) writes them; the API (api/) reads them.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from clickhouse_connect.driver.client import Client

REGISTRY = "board_snapshots"
ENTRIES = "board_entries"


@dataclass(frozen=True)
class Snapshot:
    """One published snapshot of one board."""

    board: str
    snapshot_id: str
    as_of: datetime
    policy: str  # the policy served by default
    published_at: datetime
    entry_count: int
    keep_top: int
    duration_ms: int
    policies: tuple[str, ...] = ("v1",)  # every policy it was ranked with
    void_count: int = 0  # the voided events it reflects
    stats: dict[str, float] = field(default_factory=dict, hash=False)  # the board's totals
    scorings: tuple[str, ...] = ("v1",)  # every scoring version it holds (sql/0028)

    @property
    def started_at(self) -> float:
        """When its publication began, as a Unix time (what it read was there by then)."""
        return self.published_at.timestamp() - self.duration_ms / 1000

    def as_dict(self) -> dict[str, object]:
        """Its fields, in order, as JSON values (times in RFC 3339, tuples as lists)."""
        return {
            name: iso(value)
            if isinstance(value, datetime)
            else list(value)
            if isinstance(value, tuple)
            else value
            for name, value in ((f.name, getattr(self, f.name)) for f in fields(self))
        }


COLUMNS = (
    "board, snapshot_id, as_of, policy, published_at, entry_count, keep_top, duration_ms,"
    " policies, void_count, stats, scorings"
)


def iso(moment: datetime) -> str:
    """RFC 3339 in UTC with a Z, to the second (or millisecond when it has them)."""
    moment = utc(moment)
    spec = "milliseconds" if moment.microsecond else "seconds"
    return moment.isoformat(timespec=spec).replace("+00:00", "Z")


def utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def parse_time(value: str) -> datetime:
    """An RFC 3339 time (Z or an offset; none means UTC), in UTC; a ValueError otherwise."""
    return utc(datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00")))


def from_row(row: tuple) -> Snapshot:
    board, snapshot_id, as_of, policy, published_at, count, keep_top, duration_ms = row[:8]
    policies, void_count, stats, scorings = row[8:]
    return Snapshot(
        board=board,
        snapshot_id=snapshot_id,
        as_of=utc(as_of),
        policy=policy,
        published_at=utc(published_at),
        entry_count=int(count),
        keep_top=int(keep_top),
        duration_ms=int(duration_ms),
        policies=tuple(policies),
        void_count=int(void_count),
        stats={name: float(value) for name, value in stats.items()},
        scorings=tuple(scorings),
    )


def register(client: Client, database: str, snapshot: Snapshot) -> None:
    """Write the registry row of `snapshot`: from then on readers take it as its board's
    latest. One INSERT statement with typed parameters (clickhouse-connect's `insert` imports
    pandas the first time, 0.2 s of a `toplist publish` process's only publication)."""
    client.command(
        f"""
        INSERT INTO {database}.{REGISTRY} ({COLUMNS})
        SELECT {{board:String}}, {{snapshot_id:String}},
            parseDateTime64BestEffort({{as_of:String}}, 3, 'UTC'), {{policy:String}},
            parseDateTime64BestEffort({{published_at:String}}, 3, 'UTC'),
            {{entry_count:UInt64}}, {{keep_top:UInt32}}, {{duration_ms:UInt32}},
            {{policies:Array(String)}}, {{void_count:UInt64}},
            mapFromArrays({{stat_names:Array(String)}}, {{stat_values:Array(Float64)}}),
            {{scorings:Array(String)}}
        """,
        parameters={
            "board": snapshot.board,
            "snapshot_id": snapshot.snapshot_id,
            "as_of": iso(snapshot.as_of),
            "policy": snapshot.policy,
            "published_at": iso(snapshot.published_at),
            "entry_count": snapshot.entry_count,
            "keep_top": snapshot.keep_top,
            "duration_ms": snapshot.duration_ms,
            "policies": list(snapshot.policies),
            "void_count": snapshot.void_count,
            "stat_names": list(snapshot.stats),
            "stat_values": [float(value) for value in snapshot.stats.values()],
            "scorings": list(snapshot.scorings),
        },
    )


def current_snapshot(client: Client, database: str, board: str) -> Snapshot | None:
    """The latest complete snapshot of `board`, or None before its first publication."""
    rows = client.query(
        f"SELECT {COLUMNS} FROM {database}.{REGISTRY} WHERE board = {{board:String}}"
        " ORDER BY published_at DESC, snapshot_id DESC LIMIT 1",
        parameters={"board": board},
    ).result_rows
    return from_row(rows[0]) if rows else None


def request_publication(client: Client, database: str, board: str, reason: str) -> float:
    """Ask the publisher for a snapshot of `board` (sql/0021 publication_requests); returns
    the request's time, as a Unix time, for `wait_for_publication`."""
    requested_at = datetime.now(UTC)
    client.insert(
        f"{database}.publication_requests",
        [[board, requested_at, reason]],
        column_names=["board", "requested_at", "reason"],
    )
    return requested_at.timestamp()


def wait_for_publication(
    client: Client, database: str, board: str, requested_at: float, timeout: float
) -> Snapshot | None:
    """The first snapshot of `board` whose publication began after `requested_at`, or None
    when the publisher has published none within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        snapshot = current_snapshot(client, database, board)
        if snapshot is not None and snapshot.started_at >= requested_at:
            return snapshot
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)


# Snapshot files: each board's current snapshot, readable without the engine (API worker
# processes read them; one process owns an embedded data directory). One file per board,
# `<directory>/<board>.json`, written whole beside it and renamed over it: a reader opens the
# old file or the new one, never a mix. The registry stays the truth; the file follows it.
# Its first line is a JSON header (the registry row, the catalog rows, and where each ranked
# list is); each list follows as a JSON line of its own, so a reader reads the file whole but
# decodes only the lists it serves (a big board's file is read in milliseconds).
FILE_FORMAT = 3

ListKey = tuple[str, str, str, str, str]  # metric, window, scope, policy, scoring
Row = tuple[int, str, int, dict[str, float]]  # rank, item_id, score, extra


@dataclass(frozen=True)
class SnapshotFile:
    """A snapshot as its file holds it: the registry row, every ranked list, its scopes and,
    for a board with a catalog, the catalog rows of the items it ranks that may be shown."""

    snapshot: Snapshot
    scopes: list[str]  # `global` first
    shown: dict[str, CatalogItem] | None  # by item_id
    data: bytes = field(repr=False)
    where: dict[ListKey, tuple[int, int]] = field(repr=False)  # list -> (offset, length)

    def rows(self, key: ListKey) -> list[Row]:
        """One ranked list, in rank order (empty when the snapshot has none)."""
        if key not in self.where:
            return []
        offset, length = self.where[key]
        return [tuple(row) for row in json.loads(self.data[offset : offset + length])]


def snapshot_path(directory: Path, board: str) -> Path:
    return directory / f"{board}.json"


class CatalogItem(NamedTuple):
    """What a shelf shows of an item besides its rank and score (sql/0017, 0027)."""

    name: str
    price_cents: int
    photo_url: str = ""


# The catalog as it stands: the latest row per item (sql/0017 catalog_items, 0027) of the items
# it lets a shelf show (available and not deleted), and `{where}` on the latest rows.
_SHOWN = """
    SELECT item_id, latest.2, latest.3, latest.4 FROM (
        SELECT item_id,
               argMax((restaurant_id, name, price_cents, photo_url, available, deleted, featured),
                      updated_at) AS latest
        FROM {database}.catalog_items
        {prewhere}
        GROUP BY item_id
    )
    WHERE latest.5 AND NOT latest.6 {where}
    ORDER BY item_id
"""


def shown_items(client: Client, database: str, item_ids: list[str]) -> dict[str, CatalogItem]:
    """item_id -> what a shelf shows of it, for the items the catalog lets a shelf show now."""
    if not item_ids:
        return {}
    return _catalog(client, database, "WHERE item_id IN {ids:Array(String)}", "", {"ids": item_ids})


def featured_items(client: Client, database: str, restaurant_id: str) -> dict[str, CatalogItem]:
    """The items a restaurant's catalog rows mark featured that a shelf may show, by item_id
    (the shelf of a restaurant too new to rank: api/boards.py)."""
    return _catalog(
        client,
        database,
        "",
        "AND latest.7 AND latest.1 = {restaurant:String}",
        {"restaurant": restaurant_id},
    )


def _catalog(
    client: Client, database: str, prewhere: str, where: str, parameters: dict[str, object]
) -> dict[str, CatalogItem]:
    rows = client.query(
        _SHOWN.format(database=database, prewhere=prewhere, where=where), parameters=parameters
    ).result_rows
    return {item_id: CatalogItem(name, int(price), photo) for item_id, name, price, photo in rows}


def fallback_shelf(
    client: Client, database: str, restaurant_id: str
) -> tuple[datetime | None, list[tuple[str, int]]]:
    """A restaurant's fallback shelf as the board's last publication left it
    (models/boards/popular/popular_fallback.sql): its as_of and [(item_id, all-time orders)]
    in rank order; (None, []) when none was ever built."""
    try:
        rows = client.query(
            f"""
            SELECT as_of, item_id, orders FROM {database}.popular_fallback
            WHERE restaurant_id = {{restaurant:String}} ORDER BY rank
            """,
            parameters={"restaurant": restaurant_id},
        ).result_rows
    except Exception as error:  # never built: no publication of the board yet
        if "UNKNOWN_TABLE" in str(error) or "doesn't exist" in str(error):
            return None, []
        raise
    if not rows:
        return None, []
    return utc(rows[0][0]), [(item_id, int(orders)) for _, item_id, orders in rows]


def write_file(
    client: Client, database: str, snapshot: Snapshot, directory: Path, catalog: bool
) -> Path:
    """Write `snapshot` (registered) as its board's file, replacing the previous one."""
    # Each list encoded by the engine, in rank order: [[rank, item_id, score, {extra}], ...]
    lists = client.query(
        f"""
        SELECT metric, window_name, scope, policy, scoring,
               toJSONString(arraySort(x -> (x.1, x.2), groupArray((rank, item_id, score, extra)))),
               {"groupArray(item_id)" if catalog else "[]"}
        FROM {database}.{ENTRIES}
        WHERE board = {{board:String}} AND snapshot_id = {{id:String}}
        GROUP BY metric, window_name, scope, policy, scoring
        ORDER BY metric, window_name, scope, policy, scoring
        SETTINGS output_format_json_quote_64bit_integers = 0
        """,
        parameters={"board": snapshot.board, "id": snapshot.snapshot_id},
    ).result_rows
    meta = {
        name: value.isoformat() if isinstance(value, datetime) else value
        for name, value in ((f.name, getattr(snapshot, f.name)) for f in fields(snapshot))
    }
    shown = None
    if catalog:
        shown = shown_items(client, database, sorted({i for row in lists for i in row[6]}))
    encoded = [row[5].encode() + b"\n" for row in lists]
    where, offset = [], 0
    for (metric, window, scope, policy, scoring, *_), line in zip(lists, encoded, strict=True):
        where.append([metric, window, scope, policy, scoring, offset, len(line) - 1])
        offset += len(line)
    header = _json({"format": FILE_FORMAT, "snapshot": meta, "shown": shown, "lists": where})
    directory.mkdir(parents=True, exist_ok=True)
    path = snapshot_path(directory, snapshot.board)
    partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        with partial.open("wb") as out:
            out.write(header + b"\n")
            out.writelines(encoded)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def _json(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def read_file(path: Path) -> SnapshotFile | None:
    """The snapshot in `path`, or None when there is none yet."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    end = data.find(b"\n")
    header = json.loads(data[:end])
    if header.get("format") != FILE_FORMAT:
        raise ValueError(f"{path}: format {header.get('format')!r}, not {FILE_FORMAT}")
    meta = header["snapshot"]
    snapshot = Snapshot(
        **{
            **meta,
            "as_of": datetime.fromisoformat(meta["as_of"]),
            "published_at": datetime.fromisoformat(meta["published_at"]),
            "policies": tuple(meta["policies"]),
            "scorings": tuple(meta["scorings"]),
        }
    )
    where = {
        (metric, window, scope, policy, scoring): (end + 1 + offset, length)
        for metric, window, scope, policy, scoring, offset, length in header["lists"]
    }
    scopes = sorted({key[2] for key in where}, key=lambda scope: (scope != "global", scope))
    shown = header.get("shown")
    if shown is not None:
        shown = {
            item: CatalogItem(name, int(price), photo)
            for item, (name, price, photo) in shown.items()
        }
    return SnapshotFile(snapshot, scopes, shown, data, where)


def read_snapshot_id(path: Path) -> str | None:
    """The snapshot_id in a snapshot file (None when there is none, or it cannot be read)."""
    try:
        return read_file(path).snapshot.snapshot_id  # type: ignore[union-attr]
    except (AttributeError, OSError, ValueError, KeyError, TypeError):
        return None
