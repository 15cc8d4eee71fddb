"""GET /healthz (liveness and snapshot age) and GET /metrics (Prometheus text format)."""

from __future__ import annotations

from datetime import UTC, datetime

from flask import Blueprint, Response, jsonify

from api.metrics import CONTENT_TYPE, Gauge
from api.state import toplist
from toplist.boards import BOARDS
from toplist.snapshots import iso

health = Blueprint("health", __name__)


@health.after_request
def never_cached(response: Response) -> Response:
    response.cache_control.no_store = True  # live state, not a snapshot
    return response


@health.get("/healthz")
def healthz():  # type: ignore[no-untyped-def]
    """Every board's current snapshot and every consumer this process runs, in one loop."""
    state = toplist()
    now = datetime.now(UTC)
    boards: dict[str, object] = {}
    for board, store in state.stores.items():
        snapshot = store.current()
        if snapshot is None:
            boards[board] = None
            continue
        age = (now - snapshot.published_at).total_seconds()
        boards[board] = {
            "snapshot_id": snapshot.snapshot_id,
            "as_of": iso(snapshot.as_of),
            "published_at": iso(snapshot.published_at),
            "age_seconds": round(age, 3),
            "stale": age > state.config.stale_after(board),
            "void_count": snapshot.void_count,
        }
        if board in state.metrics.last_publish_error:
            boards[board]["last_publish_error"] = state.metrics.last_publish_error[board]
    body: dict[str, object] = {"status": "ok", "boards": boards}
    if state.consumers:
        kafka = {board: _consumer_health(c) for board, c in state.consumers.items()}
        body["kafka"] = kafka
        if any(not c["running"] or c["reachable"] is False for c in kafka.values()):
            body["status"] = "degraded"  # a consumer stopped, or its brokers do not answer
    return jsonify(body)


def _consumer_health(consumer) -> dict[str, object]:  # consumer: a KafkaIngest
    status = consumer.status
    return {
        "running": status.running,
        "topic": consumer.topic,
        "messages": status.messages,
        "reachable": status.reachable,
        "lag": status.known_lag,
        "last_error": status.last_error,
    }


# A scrape's ingest counters: the totals as the table's projection keeps them, the rate from
# the last minute's batches alone (sql/0031); neither reads the batches' history.
INGEST_TOTALS = """
    SELECT board, _source, sum(received), sum(accepted), sum(rejected),
           sum(beyond_horizon), sum(conflicts)
    FROM {db}.ingest_batches GROUP BY board, _source ORDER BY board, _source
"""
INGEST_LAST_MINUTE = """
    SELECT (board, _source), sum(accepted) FROM {db}.ingest_batches
    WHERE received_at >= now64(3) - INTERVAL 60 SECOND GROUP BY board, _source
"""


def _data_gauges() -> list[Gauge]:
    """What the engine says of every board: ingest counts, dead letters, snapshots."""
    state = toplist()
    db = state.config.database
    client = next(iter(state.stores.values())).client
    gauges: list[Gauge] = []
    rows = client.query(INGEST_TOTALS.format(db=db)).result_rows
    recent = dict(client.query(INGEST_LAST_MINUTE.format(db=db)).result_rows)
    for board, source, received, accepted, rejected, beyond_horizon, conflicts in rows:
        last_minute = recent.get((board, source), 0)
        labels = {"board": board, "source": source}
        for outcome, value in (
            ("accepted", accepted),
            ("duplicate", received - accepted - rejected),
            ("rejected", rejected),
        ):
            gauges.append(
                (
                    "toplist_ingest_messages_total",
                    "counter",
                    "Messages ingested, by board, source and outcome (a repeated playback report"
                    " is accepted: it changes nothing).",
                    {**labels, "outcome": outcome},
                    float(value),
                )
            )
        gauges.append(
            (
                "toplist_ingest_rate_per_second",
                "gauge",
                "Accepted events per second over the last minute, by board and source.",
                labels,
                last_minute / 60.0,
            )
        )
        gauges.append(
            (
                "toplist_events_beyond_horizon_total",
                "counter",
                "Accepted events that arrived more than TOPLIST_LATE_HORIZON_SECONDS after their"
                " event_time: kept in raw, never counted.",
                labels,
                float(beyond_horizon),
            )
        )
        gauges.append(
            (
                "toplist_ingest_conflicting_copies_total",
                "counter",
                "Duplicates whose content differs from the copy of their event_id that counted"
                " (the first): dropped like every duplicate, counted here, by board and source.",
                labels,
                float(conflicts),
            )
        )
    for board, store in state.stores.items():
        dead = store.client.command(f"SELECT count() FROM {db}.{BOARDS[board].dead_letters}")
        gauges.append(
            (
                "toplist_dead_letters",
                "gauge",
                "Messages in each board's dead-letter table.",
                {"board": board},
                float(dead),
            )
        )
        gauges += _snapshot_gauges(board, store.current())
    for board, consumer in state.consumers.items():
        gauges += [
            (n, t, h, {**labels, "board": board}, v) for n, t, h, labels, v in consumer.gauges()
        ]
    return gauges


def _snapshot_gauges(board: str, snapshot) -> list[Gauge]:  # snapshot: a Snapshot or None
    if snapshot is None:
        return []
    labels = {"board": board}
    age = (datetime.now(UTC) - snapshot.published_at).total_seconds()
    return [
        ("toplist_snapshot_age_seconds", "gauge",
         "Seconds since each board's current snapshot was published.", labels, age),
        ("toplist_snapshot_duration_seconds", "gauge",
         "How long each board's current snapshot took to publish.", labels,
         snapshot.duration_ms / 1000.0),
        ("toplist_snapshot_as_of_seconds", "gauge",
         "as_of of each board's current snapshot, as a Unix time.", labels,
         snapshot.as_of.timestamp()),
        ("toplist_snapshot_voids", "gauge",
         "Voided events each board's current snapshot reflects.", labels,
         float(snapshot.void_count)),
        ("toplist_snapshot_entries", "gauge",
         "Rows in each board's current snapshot.", labels, float(snapshot.entry_count)),
    ]  # fmt: skip


@health.get("/metrics")
def metrics() -> Response:
    text = toplist().metrics.render(_data_gauges())
    return Response(text, content_type=CONTENT_TYPE)
