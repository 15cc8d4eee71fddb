"""Reading a board's current snapshot, through a cache that follows publications: one store
per board, the same for every board (the snapshot registry: toplist/snapshots.py).

The registry is asked for the current snapshot at most every `cache_poll_seconds` (so API
processes in server mode notice a publication by themselves), and at once after
`invalidate()`, which the in-process publisher calls. Boards are loaded once per snapshot
and kept until the snapshot changes, so a read is a dictionary lookup.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field

from clickhouse_connect.driver.client import Client

from toplist.snapshots import ENTRIES, Snapshot, current_snapshot


@dataclass(frozen=True)
class Entry:
    """One row of a ranked list: its rank, item, score and the figures it carries beside."""

    rank: int
    item_id: str
    score: int
    extra: dict[str, float]


@dataclass
class Board:
    """One ranked list of a snapshot (a scope, metric, window and policy)."""

    entries: list[Entry]  # in rank order
    by_item: dict[str, Entry]
    ranks: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.ranks = [entry.rank for entry in self.entries]

    def top(self, k: int) -> list[Entry]:
        """The cut at k, the same for every policy: the rows ranked k or better (v1 has one
        row per rank; v1-ties also keeps every song tied at rank k)."""
        return self.entries[: bisect_right(self.ranks, k)]


# Encoded answers kept per snapshot (each distinct chart request); past this, start over.
MEMO_LIMIT = 4096


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
        self._boards: dict[tuple[str, str, str, str], Board] = {}  # metric, window, scope, policy
        self._scopes: list[str] | None = None
        self._memo: dict[tuple, object] = {}
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
                self._memo = {}
            self._checked_once = True
            if generation == self._generation:  # else a publication came since: check again
                self._checked_at = now
            return self._snapshot

    def _fetch_current(self) -> Snapshot | None:
        return current_snapshot(self.client, self._database, self.name)

    def board(
        self, snapshot: Snapshot, metric: str, window: str, scope: str, policy: str = "v1"
    ) -> Board:
        """One ranked list of the snapshot, loaded once per snapshot."""
        key = (metric, window, scope, policy)
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
                if len(self._memo) >= MEMO_LIMIT:
                    self._memo = {}
                self._memo[key] = value
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

    def _load(self, snapshot_id: str, metric: str, window: str, scope: str, policy: str) -> Board:
        rows = self.client.query(
            f"""
            SELECT rank, item_id, score, extra FROM {self._database}.{ENTRIES}
            WHERE board = {{board:String}} AND snapshot_id = {{id:String}}
              AND metric = {{metric:String}} AND window_name = {{window:String}}
              AND scope = {{scope:String}} AND policy = {{policy:String}}
            ORDER BY rank, item_id
            """,
            parameters={
                "board": self.name,
                "id": snapshot_id,
                "metric": metric,
                "window": window,
                "scope": scope,
                "policy": policy,
            },
        ).result_rows
        entries = [
            Entry(int(rank), item_id, int(score), {k: float(v) for k, v in extra.items()})
            for rank, item_id, score, extra in rows
        ]
        return Board(entries, {entry.item_id: entry for entry in entries})

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
