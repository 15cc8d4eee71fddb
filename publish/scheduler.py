"""The snapshot schedule: an APScheduler job per board that publishes it on its own refresh
(toplist/boards.py names the setting), one that answers requests for a publication (a
correction with "publish": true) within a second, and one that runs the internal jobs queued
(POST /internal/rebuild: publish/rebuild.py) one at a time, and one that deletes the boards'
old snapshots apart from their runs.

Jobs are plain functions that tests call directly; a failed publication is logged and
reported, and the last good snapshot stays current.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta

from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from clickhouse_connect.driver.client import Client

from publish.publisher import prune_snapshots, publish
from publish.rebuild import run_queued
from toplist.boards import BOARDS
from toplist.config import Config
from toplist.engine import connect
from toplist.snapshots import Snapshot, current_snapshot, utc

log = logging.getLogger(__name__)

REQUESTS_JOB_ID = "publish-requested"
INTERNAL_JOBS_ID = "internal-jobs"
PRUNE_JOB_ID = "prune-snapshots"
# How often the scheduler deletes the old snapshots of its boards (`prune_job`).
PRUNE_EVERY_SECONDS = 10

# Told of every publication: (board, the snapshot or None, the error when it failed). The API
# process uses it to refresh its cache at once and to count publications in /metrics.
Listener = Callable[[str, Snapshot | None, str | None], None]


def publish_job(
    config: Config, board: str, listener: Listener | None = None, *, prune: bool = True
) -> Snapshot | None:
    """Publish one snapshot of `board` now; on failure log it and keep the last good one.
    Each board is published at its `Config.thread_priority`, so that on a busy machine the
    live boards' publications go first and the charts' and shelves' last."""
    client = _connect_at(config, config.thread_priority(board))
    try:
        snapshot = publish(client, config, board=board, prune=prune)
    except Exception as error:  # a failed run must never take the current board down
        log.exception("%s publication failed; the previous snapshot stays current", board)
        if listener:
            listener(board, None, f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ} {error}")
        return None
    finally:
        client.close()
    if listener:
        listener(board, snapshot, None)
    return snapshot


def _connect_at(config: Config, priority: int) -> Client:
    """A client whose queries run at the nice value `priority` (0: the engine's own)."""
    client = connect(config)
    if priority:
        client.set_client_setting("os_thread_priority", priority)
    return client


def job_id(board: str) -> str:
    """The scheduler's id of the job that publishes `board` on its refresh."""
    return f"publish-{board}"


class Paced:
    """A board's scheduled publication, paced so that publishing it takes at most half the
    time: a run that starts sooner after the previous one ended than that one lasted is
    skipped. A board refreshed every second whose publication takes three (a big flash sale)
    is then published every six seconds or so, rather than back to back on one core.

    `arrived` (new events of the board are in the engine) runs it at once instead of at the
    next refresh, or as soon as its pacing allows, or again right after the run under way
    (which may have begun before those events were written).

    A board whose as_of is cut on a step (`Board.as_of_step`: the charts' 10 minutes, the
    shelves' 10 seconds) ranks the same data between two cuts, so its runs are kept just after
    them: on the multiples of its refresh, a batch's time and a second later (`next_cut`),
    rather than at whatever phase the process started with (up to a whole refresh late)."""

    def __init__(self, config: Config, board: str, listener: Listener | None) -> None:
        self.config, self.board, self.listener = config, board, listener
        self.cut_step = BOARDS[board].as_of_step
        self.ended = self.lasted = 0.0
        self.scheduler: BackgroundScheduler | None = None  # set once the job is added
        self._lock = threading.Lock()
        self._running = self._again = False

    @property
    def job_id(self) -> str:
        return job_id(self.board)

    def __call__(self) -> Snapshot | None:
        started = time.monotonic()
        with self._lock:
            if started - self.ended < self.lasted:
                if self._again:  # asked for: run as soon as the pacing allows, not never
                    self._run_at(self.ended + self.lasted)
                return None
            self._running, self._again = True, False
        try:
            # Old snapshots go in `prune_job`: deleting their registry rows (a mutation)
            # would hold up this board's next run.
            return publish_job(self.config, self.board, self.listener, prune=False)
        finally:
            with self._lock:
                self.ended = time.monotonic()
                self.lasted = self.ended - started
                self._running = False
                if self._again:
                    self._run_at(self.ended + self.lasted)
                elif self.cut_step:
                    self._run_at(self.ended + self.lasted, cut=True)

    def detach(self) -> None:
        """Stop moving the job's runs (`stop_scheduler`); a run under way finishes first."""
        with self._lock:
            self.scheduler = None

    def arrived(self) -> None:
        with self._lock:
            self._again = True
            if not self._running:
                self._run_at(self.ended + self.lasted)

    def _run_at(self, moment: float, cut: bool = False) -> None:
        """Move the job's next run to `moment` (monotonic), or now when that has passed; with
        `cut`, to the first moment after a cut (`next_cut`) from then on."""
        if self.scheduler is None:
            return
        wait = max(0.0, moment - time.monotonic())
        if cut:
            now = time.time()
            refresh = self.config.refresh_seconds(self.board)
            lag = self.config.batch_seconds(self.board) + 1.0
            wait = next_cut(now + wait, refresh, lag) - now
        with contextlib.suppress(JobLookupError):  # the scheduler is shutting down
            self.scheduler.modify_job(
                self.job_id, next_run_time=datetime.now(UTC) + timedelta(seconds=wait)
            )


def stop_scheduler(scheduler: BackgroundScheduler) -> None:
    """Shut the scheduler down once the publications under way have finished. Its shutdown
    holds the job store's lock while it waits for them, and a paced run moves its next run
    through that lock as it ends: each `Paced` is detached first (under its own lock, which
    a run holds while it moves its next run), so no run ends waiting on the lock for good."""
    for job in scheduler.get_jobs():
        if isinstance(job.func, Paced):
            job.func.detach()
    scheduler.shutdown(wait=True)


def next_cut(earliest: float, refresh: float, lag: float) -> float:
    """The first moment at or after `earliest` (seconds since the epoch) that is `lag` seconds
    past a multiple of `refresh`: with a refresh that is a multiple or a divisor of the as_of
    step, every cut is followed by a run `lag` seconds later, once the batches holding the
    events before it are written."""
    return math.ceil((earliest - lag) / refresh) * refresh + lag


def requested_boards(config: Config) -> list[str]:
    """The boards with a publication requested since their current snapshot began."""
    client = connect(config)
    try:
        rows = client.query(
            f"SELECT board, max(requested_at) FROM {config.database}.publication_requests"
            " GROUP BY board"
        ).result_rows
        due = []
        for board, requested_at in rows:
            if board not in BOARDS:
                continue
            current = current_snapshot(client, config.database, board)
            if current is None or current.started_at < utc(requested_at).timestamp():
                due.append(board)
        return due
    finally:
        client.close()


def prune_job(config: Config, boards: Iterable[str]) -> None:
    """Delete the old snapshots of `boards` (`prune_snapshots`), apart from their runs and at
    the bulk boards' priority; a failure is logged and tried again next time."""
    client = _connect_at(config, config.bulk_thread_priority)
    try:
        for board in boards:
            try:
                prune_snapshots(client, config, board)
            except Exception:
                log.exception("could not delete the old %s snapshots; trying again later", board)
    finally:
        client.close()


def publish_requested(config: Config, listener: Listener | None = None) -> None:
    for board in requested_boards(config):
        publish_job(config, board, listener)


def events_arrived(scheduler: BackgroundScheduler, board: str) -> None:
    """New events of `board` are in the engine: publish it now if it publishes on arrival
    (`Board.publish_on_arrival`), within its pacing; other boards wait for their refresh."""
    if not BOARDS[board].publish_on_arrival:
        return
    job = scheduler.get_job(job_id(board))
    if job is not None and isinstance(job.func, Paced):
        job.func.arrived()


def start_scheduler(
    config: Config,
    listener: Listener | None = None,
    *,
    run_now: bool = True,
    boards: Iterable[str] = BOARDS,
) -> BackgroundScheduler:
    """Publish each of `boards` on its refresh, and what is requested within a second."""
    boards = list(boards)
    scheduler = BackgroundScheduler(timezone=UTC)
    # APScheduler reads next_run_time=None as "paused", so leave it out to wait one interval.
    first_run = {"next_run_time": datetime.now(UTC)} if run_now else {}
    for board in boards:
        paced = Paced(config, board, listener)
        scheduler.add_job(
            paced,
            "interval",
            seconds=config.refresh_seconds(board),
            id=paced.job_id,
            max_instances=1,
            coalesce=True,
            **first_run,
        )
        paced.scheduler = scheduler
    scheduler.add_job(
        prune_job,
        "interval",
        seconds=PRUNE_EVERY_SECONDS,
        id=PRUNE_JOB_ID,
        args=(config, boards),
        max_instances=1,
        coalesce=True,
    )
    scheduler.add_job(
        publish_requested,
        "interval",
        seconds=1,
        id=REQUESTS_JOB_ID,
        args=(config, listener),
        max_instances=1,
        coalesce=True,
    )
    scheduler.add_job(
        run_queued,
        "interval",
        seconds=1,
        id=INTERNAL_JOBS_ID,
        args=(config,),
        max_instances=1,
        coalesce=True,
    )
    scheduler.start()
    for board in boards:
        log.info("publishing the %s board every %g s", board, config.refresh_seconds(board))
    return scheduler
