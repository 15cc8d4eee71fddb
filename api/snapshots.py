"""Reading a board's current snapshot, through a cache that follows publications: one store
per board, the same for every board (the snapshot registry: toplist/snapshots.py).

`SnapshotStore` asks the registry for the current snapshot at most every `cache_poll_seconds`
(so API processes in server mode notice a publication by themselves), and at once after
`invalidate()`, which the in-process publisher calls. Boards are loaded once per snapshot
and kept until the snapshot changes, so a read is a dictionary lookup.

`FileSnapshotStore` reads the board's snapshot file instead (the API worker processes, which
do not hold the engine): it looks at the file every `FILE_POLL_SECONDS` and, when it was
replaced, loads the new snapshot whole before any request sees it.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from clickhouse_connect.driver.client import Client

from toplist.snapshots import (
    ENTRIES,
    CatalogItem,
    Snapshot,
    SnapshotFile,
    current_snapshot,
    fallback_shelf,
    featured_items,
    read_file,
    shown_items,
    snapshot_path,
)


@dataclass(frozen=True)
class Entry:
    """One row of a ranked list: its rank, item, score and the figures it carries beside."""

    rank: int
    item_id: str
    score: int
    extra: dict[str, float]

    def movement(self) -> dict[str, object]:
        """How it moved since the board's previous publication (publish/movement.py): `move`
        (places up: 3, -2, 0; "new"; "re-entry"), its `peak_rank` and its `streak` of
        publications in a row. None each for an entry published before movement existed."""
        extra = self.extra
        if "streak" not in extra:
            return {"move": None, "peak_rank": None, "streak": None}
        if "previous_rank" in extra:
            move: object = int(extra["previous_rank"]) - self.rank
        else:
            move = "re-entry" if extra.get("returning") else "new"
        return {"move": move, "peak_rank": int(extra["peak_rank"]), "streak": int(extra["streak"])}


@dataclass
class Board:
    """One ranked list of a snapshot (a scope, metric, window, policy and scoring version)."""

    entries: list[Entry]  # in rank order
    by_item: dict[str, Entry]
    ranks: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.ranks = [entry.rank for entry in self.entries]

    @classmethod
    def of(cls, rows: Iterable[tuple]) -> Board:
        """From (rank, item_id, score, extra) rows in rank order."""
        entries = [
            Entry(int(rank), item_id, int(score), {k: float(v) for k, v in extra.items()})
            for rank, item_id, score, extra in rows
        ]
        return cls(entries, {entry.item_id: entry for entry in entries})

    def around(self, item_id: str, n: int) -> list[Entry] | None:
        """The item's entry with the n entries above and below it, in rank order (fewer at
        either end of the kept list); None when the item is not on it."""
        entry = self.by_item.get(item_id)
        if entry is None:
            return None
        at = self.entries.index(entry)
        return self.entries[max(0, at - n) : at + n + 1]

    def page(self, k: int, offset: int = 0) -> list[Entry]:
        """The rows ranked after `offset` and k or fewer places below it, the same for every
        policy: at offset 0 the cut at k (v1 has one row per rank; v1-ties also keeps every
        song tied at rank k), and the pages at offsets 0, k, 2k... hold every row once."""
        return self.entries[bisect_right(self.ranks, offset) : bisect_right(self.ranks, offset + k)]


# Encoded answers kept per snapshot (each distinct chart request); past this, start over.
MEMO_LIMIT = 4096
# The bytes of encoded answers kept, in the memo or by raw request; past this, start over (a
# crawler's distinct URLs, each answer up to ~70 kB at k=1000, cannot grow a process unbounded).
ANSWERS_BYTES = 64 << 20


class Kept(dict):
    """Values by key that start over past `limit` of them or ANSWERS_BYTES of their sizes."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit, self.size = limit, 0

    def put(self, key: object, value: object, size: int) -> None:
        if len(self) >= self.limit or self.size > ANSWERS_BYTES:
            self.clear()
            self.size = 0
        self[key] = value
        self.size += size


class SnapshotStore:
    """The current snapshot of one board and the lists drawn from it."""

    def __init__(
        self,
        name: str,
        client_factory: Callable[[], Client],
        database: str,
        poll_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._client_factory = client_factory
        self._client: Client | None = None
        self._database = database
        self._poll_seconds = poll_seconds
        self._clock = clock
        self._lock = threading.RLock()
        self._snapshot: Snapshot | None = None
        self._checked_at: float | None = None
        # by metric, window, scope, policy, scoring
        self._boards: dict[tuple[str, str, str, str, str], Board] = {}
        self._scopes: list[str] | None = None
        self._memo = Kept(MEMO_LIMIT)
        self._refreshing = False
        self._checked_once = False
        self._generation = 0

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    @property
    def database(self) -> str:
        return self._database

    def invalidate(self) -> None:
        with self._lock:
            self._checked_at = None
            self._generation += 1

    def current(self) -> Snapshot | None:
        """The current snapshot. When a check is due, one request asks the registry while
        the others go on with the snapshot they have (no convoy behind the query)."""
        with self._lock:
            now = self._clock()
            due = self._checked_at is None or now - self._checked_at >= self._poll_seconds
            if not due or (self._refreshing and self._checked_once):
                return self._snapshot
            self._refreshing = True
            generation = self._generation
        try:
            latest = self._fetch_current()
        finally:
            with self._lock:
                self._refreshing = False
        with self._lock:
            if latest != self._snapshot:
                self._snapshot = latest
                self._boards = {}
                self._scopes = None
                self._memo = Kept(MEMO_LIMIT)
            self._checked_once = True
            if generation == self._generation:  # else a publication came since: check again
                self._checked_at = now
            return self._snapshot

    def _fetch_current(self) -> Snapshot | None:
        return current_snapshot(self.client, self._database, self.name)

    def board(
        self,
        snapshot: Snapshot,
        metric: str,
        window: str,
        scope: str,
        policy: str = "v1",
        scoring: str = "v1",
    ) -> Board:
        """One ranked list of the snapshot, loaded once per snapshot."""
        key = (metric, window, scope, policy, scoring)
        with self._lock:
            board = self._boards.get(key) if self._snapshot == snapshot else None
            if board is None:
                board = self._load(snapshot.snapshot_id, *key)
                if self._snapshot == snapshot:
                    self._boards[key] = board
            return board

    def memo(self, snapshot: Snapshot, key: tuple, build: Callable[[], object]) -> object:
        """`build()` once per snapshot and key (an encoded answer: a snapshot never changes, so
        neither does what is drawn from it)."""
        with self._lock:
            if self._snapshot == snapshot and key in self._memo:
                return self._memo[key]
        value = build()
        with self._lock:
            if self._snapshot == snapshot:
                self._memo.put(key, value, len(value) if isinstance(value, bytes) else 0)
        return value

    def scopes(self, snapshot: Snapshot) -> list[str]:
        """The scopes that have a board in the snapshot, `global` first."""
        with self._lock:
            if self._snapshot == snapshot and self._scopes is not None:
                return self._scopes
            rows = self.client.query(
                f"""
                SELECT DISTINCT scope FROM {self._database}.{ENTRIES}
                WHERE board = {{board:String}} AND snapshot_id = {{id:String}}
                ORDER BY scope != 'global', scope
                """,
                parameters={"board": self.name, "id": snapshot.snapshot_id},
            ).result_rows
            scopes = [scope for (scope,) in rows]
            if self._snapshot == snapshot:
                self._scopes = scopes
            return scopes

    def _load(
        self, snapshot_id: str, metric: str, window: str, scope: str, policy: str, scoring: str
    ) -> Board:
        rows = self.client.query(
            f"""
            SELECT rank, item_id, score, extra FROM {self._database}.{ENTRIES}
            WHERE board = {{board:String}} AND snapshot_id = {{id:String}}
              AND metric = {{metric:String}} AND window_name = {{window:String}}
              AND scope = {{scope:String}} AND policy = {{policy:String}}
              AND scoring = {{scoring:String}}
            ORDER BY rank, item_id
            """,
            parameters={
                "board": self.name,
                "id": snapshot_id,
                "metric": metric,
                "window": window,
                "scope": scope,
                "policy": policy,
                "scoring": scoring,
            },
        ).result_rows
        return Board.of(rows)

    def series(
        self, snapshot: Snapshot, scope: str, song_id: str, step: int, steps: int | None
    ) -> list[int]:
        """A song's listens in the scope per `step` seconds, from its 10-minute buckets, in the
        `steps` steps that end at the snapshot's as_of (None: back to its first listen), oldest
        first. Each event_id counts once and voided events not at all, as on the charts; the
        buckets are read as they are now (late listens since the publication included)."""
        rows = self.client.query(
            f"""
            SELECT intDiv(dateDiff('second', bucket_start, {{as_of:DateTime('UTC')}}) - 1,
                          {{step:UInt32}}) AS back,
                   sumMerge(listens) AS listens
            FROM {self._database}.listens_by_10m
            WHERE bucket_start < {{as_of:DateTime('UTC')}}
              AND ({{span:UInt64}} = 0
                   OR bucket_start >= {{as_of:DateTime('UTC')}} - toIntervalSecond({{span:UInt64}}))
              AND song_id = {{song:String}}
              AND ({{scope:String}} = 'global' OR country = {{scope:String}})
            GROUP BY back
            """,
            parameters={
                "as_of": snapshot.as_of,
                "step": step,
                "span": step * steps if steps is not None else 0,
                "song": song_id,
                "scope": scope,
            },
        ).result_rows
        by_step = {int(back): int(listens) for back, listens in rows}
        count = steps if steps is not None else max(by_step, default=-1) + 1
        return [by_step.get(back, 0) for back in reversed(range(count))]

    # Whether a shelf drawn from a snapshot is fixed by it (its catalog rows are in it), or
    # depends on the catalog at request time.
    catalog_in_snapshot = False

    def shown_items(self, snapshot: Snapshot | None, item_ids: list[str]) -> dict[str, CatalogItem]:
        """What a shelf shows of each item the catalog lets it show now, by item_id (a
        worker's store: as the catalog stood when `snapshot` was published)."""
        return shown_items(self.client, self._database, item_ids)

    def featured(self, restaurant_id: str) -> dict[str, CatalogItem]:
        """The restaurant's featured items that a shelf may show now, by item_id."""
        return featured_items(self.client, self._database, restaurant_id)

    def fallback(self, restaurant_id: str) -> tuple[object, list[tuple[str, int]]]:
        """The restaurant's fallback shelf: its as_of and [(item_id, all-time orders)]."""
        return fallback_shelf(self.client, self._database, restaurant_id)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


# Raw requests kept for api/hot.py (and at most ANSWERS_BYTES of their answers).
ANSWERS_LIMIT = 8192


@dataclass(frozen=True)
class Answer:
    store: SnapshotStore
    snapshot: Snapshot
    stale: bool
    body: bytes
    endpoint: str  # the route, as /metrics labels requests


class Answers:
    """Encoded answers by raw request."""

    def __init__(self) -> None:
        self._by_request = Kept(ANSWERS_LIMIT)

    def keep(self, environ: dict, answer: Answer) -> None:
        self._by_request.put(_request(environ), answer, len(answer.body))

    def get(self, environ: dict) -> Answer | None:
        return self._by_request.get(_request(environ))


def _request(environ: dict) -> tuple[str, str]:
    return environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", "")


# How often a worker looks whether its board's file was replaced (a stat, made only when a
# request comes), so that a live board's new snapshot is served within a tenth of a second.
FILE_POLL_SECONDS = 0.1


class FileSnapshotStore(SnapshotStore):
    """The current snapshot of one board, read from its snapshot file (no engine)."""

    catalog_in_snapshot = True

    def __init__(
        self, name: str, directory: Path, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(name, _no_client, "", poll_seconds=FILE_POLL_SECONDS, clock=clock)
        self._path = snapshot_path(directory, name)
        self._stat: tuple[int, int, int] | None = None
        self._files: dict[str, SnapshotFile] = {}  # by snapshot_id: the current and the last

    def _fetch_current(self) -> Snapshot | None:
        try:
            stat = self._path.stat()
        except FileNotFoundError:
            return self._snapshot
        seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if seen == self._stat:
            return self._snapshot
        loaded = read_file(self._path)
        self._stat = seen
        if loaded is None:
            return self._snapshot
        current = self._files.get(self._snapshot.snapshot_id) if self._snapshot else None
        self._files = {loaded.snapshot.snapshot_id: loaded}
        if current is not None:  # a request that began on it may still be drawing from it
            self._files.setdefault(current.snapshot.snapshot_id, current)
        return loaded.snapshot

    def _file(self, snapshot: Snapshot) -> SnapshotFile:
        return self._files[snapshot.snapshot_id]

    def _load(
        self, snapshot_id: str, metric: str, window: str, scope: str, policy: str, scoring: str
    ) -> Board:
        return Board.of(self._files[snapshot_id].rows((metric, window, scope, policy, scoring)))

    def scopes(self, snapshot: Snapshot) -> list[str]:
        return self._file(snapshot).scopes

    def series(
        self, snapshot: Snapshot, scope: str, song_id: str, step: int, steps: int | None
    ) -> list[int]:
        raise RuntimeError("a song's series is read from the engine (api/workers.py sends it)")

    def featured(self, restaurant_id: str) -> dict[str, CatalogItem]:
        raise RuntimeError("a restaurant's shelf is read from the engine (api/workers.py)")

    def fallback(self, restaurant_id: str) -> tuple[object, list[tuple[str, int]]]:
        raise RuntimeError("a restaurant's shelf is read from the engine (api/workers.py)")

    def shown_items(self, snapshot: Snapshot | None, item_ids: list[str]) -> dict[str, CatalogItem]:
        if snapshot is None:
            raise RuntimeError("a restaurant's shelf is read from the engine (api/workers.py)")
        shown = self._file(snapshot).shown or {}
        return {item: shown[item] for item in item_ids if item in shown}


def _no_client() -> Client:
    raise RuntimeError("an API worker reads snapshot files; it holds no engine client")
