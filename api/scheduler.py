"""The snapshot schedule: APScheduler jobs that publish the charts every interval, and each
other board (live listeners, the flash sale, the marketplace shelves) on its own refresh."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from apscheduler.schedulers.background import BackgroundScheduler

from api.metrics import Metrics
from api.publisher import BoardSnapshot, Snapshot, publish, publish_board
from api.snapshots import BoardStore, SnapshotStore
from toplist.config import Config
from toplist.engine import connect

log = logging.getLogger(__name__)

PUBLISH_JOB_ID = "publish-snapshot"


def publish_job(
    config: Config, store: SnapshotStore | None = None, metrics: Metrics | None = None
) -> Snapshot | None:
    """Publish one snapshot now; on failure log it and keep serving the last good one."""
    client = connect(config)
    try:
        snapshot = publish(client, config)
    except Exception as error:  # a failed run must never take the current board down
        log.exception("publication failed; the previous snapshot stays current")
        if metrics:
            metrics.record_publication(False, f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ} {error}")
        return None
    finally:
        client.close()
    if metrics:
        metrics.record_publication(True)
    if store:
        store.invalidate()
    return snapshot


def publish_board_job(
    config: Config, board: str, store: BoardStore | None = None
) -> BoardSnapshot | None:
    """Publish one snapshot of another board now; on failure log it and keep serving the
    last good one."""
    client = connect(config)
    try:
        snapshot = publish_board(client, config, board)
    except Exception:  # a failed run must never take the current board down
        log.exception("%s publication failed; the previous snapshot stays current", board)
        return None
    finally:
        client.close()
    if store:
        store.invalidate()
    return snapshot


def start_scheduler(
    config: Config,
    store: SnapshotStore | None = None,
    metrics: Metrics | None = None,
    *,
    run_now: bool = True,
    boards: dict[str, BoardStore | None] | None = None,
) -> BackgroundScheduler:
    scheduler = BackgroundScheduler(timezone=UTC)
    # APScheduler reads next_run_time=None as "paused", so leave it out to wait one interval.
    first_run = {"next_run_time": datetime.now(UTC)} if run_now else {}
    scheduler.add_job(
        publish_job,
        "interval",
        seconds=config.publish_interval_seconds,
        id=PUBLISH_JOB_ID,
        args=(config, store, metrics),
        max_instances=1,
        coalesce=True,
        **first_run,
    )
    for board, board_store in (boards or {}).items():
        scheduler.add_job(
            publish_board_job,
            "interval",
            seconds=config.refresh_seconds(board),
            id=f"publish-{board}",
            args=(config, board, board_store),
            max_instances=1,
            coalesce=True,
            **first_run,
        )
    scheduler.start()
    log.info("publishing a snapshot every %g s", config.publish_interval_seconds)
    for board in boards or {}:
        log.info("publishing the %s board every %g s", board, config.refresh_seconds(board))
    return scheduler
