"""Publishing a snapshot of a board: run its dbt rankings at an as_of, then make them
current atomically. One path for every board (toplist/boards.py names each board's models).

Order of work, and why a failure anywhere leaves the previous snapshot current:
1. the publisher takes the board's lease (publish/lease.py): two publishers of one board,
   in one process or several, never interleave, since they share dbt's model tables;
2. when the lease's last holder died (and once per process), it removes the entries that a
   publication killed before its registry row left behind;
3. the board's rankings and summary (and the models they need) are built for the as_of: the
   SQL dbt compiled from the models, run without dbt (publish/plan.py), or on a cluster
   `dbt run` itself;
4. the rankings are copied into `board_entries` under a new snapshot_id, and counted back;
5. only then the registry row goes into `board_snapshots`. Readers follow registry rows
   only, so until step 5 nobody sees the new entries; a failed run deletes what it wrote.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import DatabaseError

from publish import dbt, movement, plan
from publish.lease import publication_lease
from toplist.boards import BOARDS, CHARTS, Board
from toplist.boards import board as find_board
from toplist.config import Config
from toplist.snapshots import (
    ENTRIES,
    REGISTRY,
    Snapshot,
    current_snapshot,
    iso,
    read_snapshot_id,
    register,
    snapshot_path,
    utc,
    write_file,
)

log = logging.getLogger(__name__)

# The lease is per board; dbt runs one at a time per process. Boards published from their plans
# (publish/plan.py: disjoint model tables, no dbt) publish side by side.
_dbt_lock = threading.Lock()
# The boards whose unregistered entries this process has looked for (once, then only after a
# publisher died holding the board's lease).
_swept: set[tuple[str, str]] = set()  # (database, board)


class PublishError(RuntimeError):
    """A publication did not complete; the previous snapshot stays current."""


def check_as_of(as_of: datetime | None, current: datetime | None, allow_older: bool) -> None:
    """Refuse an as_of in the future (a typo would publish empty windows, served as current)
    and, unless `allow_older`, one older than the current snapshot's (which would replace it
    with an earlier view). The current as_of is aligned, so comparing before alignment is
    the same as after."""
    if as_of is None:
        return
    now = datetime.now(UTC)
    if utc(as_of) > now:
        raise PublishError(
            f"as_of {iso(utc(as_of))} is in the future (now {iso(now)}); nothing was published"
        )
    if current is not None and utc(as_of) < current and not allow_older:
        raise PublishError(
            f"as_of {iso(utc(as_of))} is older than the current snapshot's ({iso(current)});"
            " ask for it explicitly (--allow-older) to publish it"
        )


def publish(
    client: Client,
    config: Config,
    as_of: datetime | None = None,
    *,
    board: str = CHARTS.name,
    before_commit: Callable[[str], None] | None = None,
    allow_older: bool = False,
    prune: bool = True,
) -> Snapshot:
    """Rank `board` at `as_of` (default now; aligned as the board's models align it) and
    publish one snapshot of it.

    `before_commit` runs after the entries are written and before the snapshot becomes
    current; an exception there aborts the publication like any other failure would. An
    as_of in the future is refused, and so is one older than the current snapshot's unless
    `allow_older` (`check_as_of`). With `prune`, the board's old snapshots go afterwards
    (`prune_snapshots`; the scheduler does it apart from its boards' runs).
    """
    spec = find_board(board)
    one_at_a_time = contextlib.nullcontext() if plan.usable(config) else _dbt_lock
    with one_at_a_time, publication_lease(client, config, spec.name) as lease:
        current = current_snapshot(client, config.database, spec.name)
        check_as_of(as_of, current.as_of if current else None, allow_older)
        if lease.after_crash or (config.database, spec.name) not in _swept:
            discard_unregistered(client, config.database, spec.name)
            _swept.add((config.database, spec.name))
        snapshot = _publish(client, config, spec, as_of, before_commit)
        write_snapshot_file(client, config, snapshot)
        if prune:
            prune_snapshots(client, config, spec.name)
    return snapshot


def write_snapshot_file(client: Client, config: Config, snapshot: Snapshot) -> None:
    """Make a registered snapshot readable by the API workers (config.snapshot_files). The
    registry already names it, so a failure here is reported as a failed publication and the
    workers keep serving the previous file until the next publication writes one."""
    directory = config.snapshot_files
    if directory is None:
        return
    try:
        write_file(client, config.database, snapshot, directory, find_board(snapshot.board).catalog)
    except (OSError, DatabaseError) as error:
        raise PublishError(
            f"{snapshot.board}: published {snapshot.snapshot_id}, but could not write it to"
            f" {directory} for the API workers, which keep the previous one: {error}"
        ) from error


def sync_snapshot_files(client: Client, config: Config) -> None:
    """Write each board's current snapshot as its file where the file holds another one (a
    snapshot published before the files existed, or a directory emptied since)."""
    directory = config.snapshot_files
    if directory is None:
        return
    for name in BOARDS:
        snapshot = current_snapshot(client, config.database, name)
        if snapshot is None:
            continue
        kept = read_snapshot_id(snapshot_path(directory, name))
        if kept != snapshot.snapshot_id:
            write_snapshot_file(client, config, snapshot)


def rank(client: Client, config: Config, board: Board, as_of: datetime | None) -> None:
    """Build the board's rankings and summary (and the models they need) at `as_of`: the SQL
    dbt compiled for the board, without dbt's run cost (publish/plan.py), or on a cluster
    `dbt run` itself. Run under the board's lease: the model tables are the board's."""
    try:
        if plan.usable(config):
            plan.run(client, config, board, as_of)
        else:
            dbt.invoke(
                config,
                [
                    "run",
                    "--select",
                    f"+{board.rankings} +{board.summary}",
                    "--vars",
                    repr(dbt.dbt_vars(config, as_of)),
                ],
                quiet=True,
                reuse_parse=True,
            )
    except (dbt.DbtError, DatabaseError) as error:
        raise PublishError(
            f"{board.name}: ranking failed, nothing was published: {error}"
        ) from error


def _publish(
    client: Client,
    config: Config,
    board: Board,
    as_of: datetime | None,
    before_commit: Callable[[str], None] | None,
) -> Snapshot:
    db = config.database
    started = time.monotonic()
    # Read before ranking: every void counted here is reflected in the snapshot (one made
    # while the ranking runs may be reflected too, and is counted by the next snapshot).
    void_count = (
        int(client.command(f"SELECT uniqExact(event_id) FROM {db}.{board.voids}"))
        if board.voids
        else 0
    )
    rank(client, config, board, as_of)

    scorings = "scorings" if board.scored else "['v1']"
    aligned, policy, policies, stats, scorings = client.query(
        f"SELECT as_of, policy, policies, stats, {scorings} FROM {db}.{board.summary}"
    ).result_rows[0]
    aligned = utc(aligned)
    snapshot_id = f"{board.name}-{aligned:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:12]}"
    try:
        movement.insert_entries(client, db, board, snapshot_id, aligned)
        expected = int(client.command(f"SELECT count() FROM {db}.{board.rankings}"))
        written = int(
            client.command(
                f"SELECT count() FROM {db}.{ENTRIES}"
                " WHERE board = {board:String} AND snapshot_id = {id:String}",
                parameters={"board": board.name, "id": snapshot_id},
            )
        )
        if written != expected:
            raise PublishError(f"wrote {written} entries for {snapshot_id}, expected {expected}")
        if before_commit:
            before_commit(snapshot_id)
        now = datetime.now(UTC)  # stored to the millisecond, so keep no more than that
        snapshot = Snapshot(
            board=board.name,
            snapshot_id=snapshot_id,
            as_of=aligned,
            policy=policy,
            published_at=now.replace(microsecond=now.microsecond // 1000 * 1000),
            entry_count=written,
            keep_top=config.keep_top_of(board.name),
            duration_ms=int((time.monotonic() - started) * 1000),
            policies=tuple(policies),
            void_count=void_count,
            stats={name: float(value) for name, value in stats.items()},
            scorings=tuple(scorings),
        )
        register(client, db, snapshot)
    except Exception:
        _discard_entries(client, db, board.name, snapshot_id)
        raise
    log.info(
        "published %s snapshot %s (as_of %s, policies %s, %d entries, %d voids, %d ms)",
        board.name,
        snapshot_id,
        iso(aligned),
        ",".join(policies),
        written,
        void_count,
        snapshot.duration_ms,
    )
    return snapshot


def drop_entries(client: Client, database: str, board: str, snapshot_ids: list[str]) -> None:
    """Remove the entries of `board`'s snapshots `snapshot_ids`: each snapshot's entries are a
    partition of their own (sql/0033), dropped in milliseconds and off the disk at once."""
    for snapshot_id in snapshot_ids:
        client.command(
            f"ALTER TABLE {database}.{ENTRIES} DROP PARTITION ({{board:String}}, {{id:String}})",
            parameters={"board": board, "id": snapshot_id},
        )


def _discard_entries(client: Client, db: str, board: str, snapshot_id: str) -> None:
    try:
        drop_entries(client, db, board, [snapshot_id])
    except Exception:  # the registry never names it; the next publication removes it
        log.exception("could not remove the entries of failed snapshot %s", snapshot_id)


def discard_unregistered(client: Client, database: str, board: str) -> int:
    """Remove the entries no registry row names: what a publication killed before its
    registry row left behind (run under the board's lease, so none is being written now)."""
    left = client.query(
        f"""
        SELECT snapshot_id, count() FROM {database}.{ENTRIES}
        WHERE board = {{board:String}} AND snapshot_id NOT IN (
            SELECT snapshot_id FROM {database}.{REGISTRY} WHERE board = {{board:String}})
        GROUP BY snapshot_id
        """,
        parameters={"board": board},
    ).result_rows
    removed = sum(count for _, count in left)
    if left:
        drop_entries(client, database, board, [snapshot_id for snapshot_id, _ in left])
        log.warning("removed %d %s entries that no published snapshot names", removed, board)
    return removed


def prune_snapshots(client: Client, config: Config, board: str) -> None:
    """Keep the newest `snapshot_retention` snapshots of `board`; older ones go a quarter of
    the retention at a time (at least one): their registry rows first, with a DELETE (a
    mutation of the small registry table, tens of milliseconds), then their entries'
    partitions."""
    db = config.database
    stale = client.query(
        f"""
        SELECT snapshot_id FROM {db}.{REGISTRY} WHERE board = {{board:String}}
        ORDER BY published_at DESC, snapshot_id DESC
        LIMIT 1000000 OFFSET {{keep:UInt32}}
        """,
        parameters={"keep": config.snapshot_retention, "board": board},
    ).result_rows
    if len(stale) < max(1, config.snapshot_retention // 4):
        return
    ids = [row[0] for row in stale]
    # the registry row first: readers never see a snapshot half gone
    client.command(
        f"DELETE FROM {db}.{REGISTRY} WHERE board = {{board:String}}"
        " AND snapshot_id IN {ids:Array(String)}",
        parameters={"board": board, "ids": ids},
    )
    drop_entries(client, db, board, ids)
