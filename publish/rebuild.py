"""Rebuild jobs: a scoring version backfilled over a board's kept snapshots (issue 29).

`POST /internal/rebuild` queues a job (toplist/jobs.py); the scheduler runs the queued jobs one
at a time (`run_queued`). For each kept snapshot whose as_of lies in the request's range, oldest
first, under the board's lease: the board is ranked again at the snapshot's as_of with the
version (`publisher.rank`, the SQL a publication runs, over the aggregates as they are now),
and the version's lists of the scope replace those the snapshot held (none, for a new version);
then its registry row records the version. Readers see a rebuilt snapshot as a new one
(its row changed), so no cached answer outlives a rebuild.

The job's result says how many snapshots and entries it wrote and how the version's top 10 on
each restaurant's lists overlaps the default version's (TOPLIST_SCORING_VERSION) in the latest
snapshot it rebuilt: the figure to read before switching the default.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace

from clickhouse_connect.driver.client import Client

from publish.lease import publication_lease
from publish.publisher import rank, write_snapshot_file
from toplist.boards import board as find_board
from toplist.config import Config
from toplist.engine import connect
from toplist.jobs import kept_snapshots, queued, record, unfinished
from toplist.snapshots import ENTRIES, REGISTRY, current_snapshot

log = logging.getLogger(__name__)

KIND = "rebuild"
TOP = 10  # the overlap is of each list's top 10


def rebuild(
    client: Client, config: Config, request: dict, progress: Callable[[int, int], None]
) -> dict[str, object]:
    """Backfill `request` (toplist/jobs.py rebuild_request) and return the job's result."""
    board = find_board(request["board"])
    version, scope, db = request["scoring_version"], request["scope"], config.database
    kept = kept_snapshots(client, db, request)
    # v1 is always ranked (the cold start of a restaurant's shelf reads it); only `version`'s
    # lists are copied.
    ranking = replace(config, scoring_versions=tuple(dict.fromkeys(("v1", version))))
    one_scope = "" if scope == "all" else " AND scope = {scope:String}"
    # the version's entries of the scope in one snapshot: what is replaced, and counted
    these = (
        "board = {board:String} AND snapshot_id = {id:String} AND scoring = {scoring:String}"
        + one_scope
    )
    entries = 0
    progress(0, len(kept))
    for done, (snapshot_id, as_of, _) in enumerate(kept, 1):
        params = {"board": board.name, "id": snapshot_id, "scoring": version, "scope": scope}
        with publication_lease(client, config, board.name):
            rank(client, ranking, board, as_of)
            client.command(f"DELETE FROM {db}.{ENTRIES} WHERE {these}", parameters=params)
            client.command(
                f"""
                INSERT INTO {db}.{ENTRIES}
                    (board, snapshot_id, policy, scoring, scope, metric, window_name, rank,
                     item_id, score, extra)
                SELECT {{board:String}}, {{id:String}}, *
                FROM (SELECT {board.entry_columns} FROM {db}.{board.rankings})
                WHERE scoring = {{scoring:String}}{one_scope}
                """,
                parameters=params,
            )
            entries += int(
                client.command(
                    f"SELECT count() FROM {db}.{ENTRIES} WHERE {these}", parameters=params
                )
            )
            # The row changes (the version, and when it was rebuilt), so every reader's cache
            # of the snapshot starts over.
            client.command(
                f"""
                ALTER TABLE {db}.{REGISTRY} UPDATE
                    scorings = arrayDistinct(arrayConcat(scorings, [{{scoring:String}}])),
                    stats = mapUpdate(stats, CAST(
                        map('rebuilt_at', toFloat64(toUnixTimestamp64Milli(now64(3))) / 1000),
                        'Map(LowCardinality(String), Float64)'))
                WHERE board = {{board:String}} AND snapshot_id = {{id:String}}
                SETTINGS mutations_sync = 2
                """,
                parameters=params,
            )
        progress(done, len(kept))
        log.info("rebuilt %s with scoring %s (%d of %d)", snapshot_id, version, done, len(kept))
    _restore(client, config, board.name, kept[-1][1])
    latest = kept[-1][0]
    return {
        "snapshots": len(kept),
        "entries": entries,
        "overlap": overlap(client, config, board.name, latest, version, scope),
    }


def _restore(client: Client, config: Config, board: str, last_ranked: object) -> None:
    """Leave the board's model tables as its current snapshot made them (the fallback shelf is
    read from one), and its snapshot file as its registry row now is."""
    with publication_lease(client, config, board):
        current = current_snapshot(client, config.database, board)
        if current is None:
            return
        if current.as_of != last_ranked:
            rank(client, config, find_board(board), current.as_of)
        write_snapshot_file(client, config, current)


def overlap(
    client: Client, config: Config, board: str, snapshot_id: str, version: str, scope: str
) -> dict[str, object]:
    """How `version`'s top 10 overlaps the default version's on each restaurant's lists of
    the snapshot (one scope's lists, when the rebuild was of one): the share of the larger
    top 10 that both hold, per list, their mean, per metric and window, and the lowest."""
    against = config.scoring_version
    where = "startsWith(scope, 'restaurant:')" if scope == "all" else "scope = {scope:String}"
    rows = client.query(
        f"""
        SELECT scope, metric, window_name,
               groupArrayIf(item_id, scoring = {{version:String}}),
               groupArrayIf(item_id, scoring = {{against:String}})
        FROM {config.database}.{ENTRIES}
        WHERE board = {{board:String}} AND snapshot_id = {{id:String}} AND rank <= {TOP}
          AND scoring IN ({{version:String}}, {{against:String}}) AND {where}
        GROUP BY scope, metric, window_name
        ORDER BY scope, metric, window_name
        """,
        parameters={
            "board": board,
            "id": snapshot_id,
            "version": version,
            "against": against,
            "scope": scope,
        },
    ).result_rows
    lists = [
        (scope_, metric, window, len(set(a) & set(b)) / max(len(a), len(b)))
        for scope_, metric, window, a, b in rows
    ]
    by_list: dict[str, list[float]] = defaultdict(list)
    for _, metric, window, share in lists:
        by_list[f"{metric}/{window}"].append(share)
    return {
        "against": against,
        "top": TOP,
        "snapshot_id": snapshot_id,
        "lists": len(lists),
        "mean": _mean([share for *_, share in lists]),
        "by_list": {name: _mean(shares) for name, shares in sorted(by_list.items())},
        "lowest": [
            {"scope": s, "metric": m, "window": w, "overlap": round(share, 4)}
            for s, m, w, share in sorted(lists, key=lambda row: (row[3], row[:3]))[:5]
        ],
    }


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


# The databases whose interrupted jobs this process has looked for (once, at its first run).
_recovered: set[str] = set()


def run_queued(config: Config) -> int:
    """Run the queued jobs, oldest first, recording each one's progress and its result or
    error; returns how many ran. A scheduler job (publish/scheduler.py) and plain to call.
    At its first run in a process, a job left running by a process that stopped is marked
    failed, saying so (one scheduler runs a deployment's jobs)."""
    client = connect(config)
    try:
        if config.database not in _recovered:
            for job in unfinished(client, config.database):
                log.warning("job %s was left running; marking it failed", job.job_id)
                record(
                    client,
                    config.database,
                    job,
                    state="failed",
                    error="interrupted: the process running it stopped; submit it again",
                )
            _recovered.add(config.database)
        jobs = [job for job in queued(client, config.database) if job.kind == KIND]
        for job in jobs:
            job = record(client, config.database, job, state="running")
            log.info("job %s: %s %s", job.job_id, job.kind, job.request)

            def progress(done: int, total: int) -> None:
                nonlocal job
                job = record(client, config.database, job, done=done, total=total)

            try:
                result = rebuild(client, config, job.request, progress)
            except Exception as error:  # reported in the job, never raised into the scheduler
                log.exception("job %s failed", job.job_id)
                record(client, config.database, job, state="failed", error=str(error)[:2000])
            else:
                record(client, config.database, job, state="succeeded", result=result)
        return len(jobs)
    finally:
        client.close()
