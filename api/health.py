"""GET /healthz (liveness and snapshot age) and GET /metrics (Prometheus text format)."""

from __future__ import annotations

from datetime import UTC, datetime

from flask import Blueprint, Response, jsonify

from api.app import toplist
from api.publisher import iso
from ingest.load import STREAMS

health = Blueprint("health", __name__)


@health.after_request
def never_cached(response: Response) -> Response:
    response.cache_control.no_store = True  # live state, not a snapshot
    return response


@health.get("/healthz")
def healthz():  # type: ignore[no-untyped-def]
    state = toplist()
    snapshot = state.store.current()
    body: dict[str, object] = {"status": "ok", "snapshot": None}
    if snapshot is not None:
        age = (datetime.now(UTC) - snapshot.published_at).total_seconds()
        body["snapshot"] = {
            "snapshot_id": snapshot.snapshot_id,
            "as_of": iso(snapshot.as_of),
            "published_at": iso(snapshot.published_at),
            "age_seconds": round(age, 3),
            "stale": age > state.config.stale_after_seconds,
            "void_count": snapshot.void_count,
        }
    if state.metrics.last_publish_error:
        body["last_publish_error"] = state.metrics.last_publish_error
    body["boards"] = {}
    for board, store in state.boards.items():
        current = store.current()
        if current is None:
            body["boards"][board] = None
            continue
        age = (datetime.now(UTC) - current.published_at).total_seconds()
        body["boards"][board] = {
            "snapshot_id": current.snapshot_id,
            "as_of": iso(current.as_of),
            "published_at": iso(current.published_at),
            "age_seconds": round(age, 3),
            "stale": age > state.config.stale_after(board),
        }
    if state.ingest is not None:
        body["kafka"] = _consumer_health(state.ingest)
    if state.board_ingest:
        body["kafka_boards"] = {b: _consumer_health(c) for b, c in state.board_ingest.items()}
    return jsonify(body)


def _consumer_health(consumer) -> dict[str, object]:  # consumer: a KafkaIngest
    status = consumer.status
    return {
        "running": status.running,
        "topic": consumer.topic,
        "messages": status.messages,
        "lag": sum(status.lag.values()),
        "last_error": status.last_error,
    }


def _data_gauges() -> list[tuple[str, str, str, dict[str, str], float]]:
    state = toplist()
    db = state.config.database
    gauges: list[tuple[str, str, str, dict[str, str], float]] = []
    rows = state.store.client.query(
        f"""
        SELECT _source, sum(received), sum(accepted), sum(rejected),
               sumIf(accepted, received_at >= now64(3) - INTERVAL 60 SECOND),
               sum(beyond_horizon)
        FROM {db}.ingest_batches WHERE board = 'charts' GROUP BY _source ORDER BY _source
        """
    ).result_rows
    for source, received, accepted, rejected, last_minute, beyond_horizon in rows:
        for outcome, value in (
            ("accepted", accepted),
            ("duplicate", received - accepted - rejected),
            ("rejected", rejected),
        ):
            gauges.append(
                (
                    "toplist_ingest_messages_total",
                    "counter",
                    "Listen messages ingested, by source and outcome.",
                    {"source": source, "outcome": outcome},
                    float(value),
                )
            )
        gauges.append(
            (
                "toplist_ingest_rate_per_second",
                "gauge",
                "Accepted listen events per second over the last minute, by source.",
                {"source": source},
                last_minute / 60.0,
            )
        )
        gauges.append(
            (
                "toplist_events_beyond_horizon_total",
                "counter",
                "Accepted events that arrived more than TOPLIST_LATE_HORIZON_SECONDS after their"
                " event_time: kept in raw, never counted.",
                {"source": source},
                float(beyond_horizon),
            )
        )
    dead_letters = state.store.client.command(f"SELECT count() FROM {db}.listens_dead_letters")
    gauges.append(
        (
            "toplist_dead_letters",
            "gauge",
            "Messages in the dead-letter table.",
            {},
            float(dead_letters),
        )
    )
    gauges += _board_gauges()
    consumed = state.ingest.gauges() if state.ingest is not None else []
    for board, consumer in state.board_ingest.items():
        consumed += [
            (n, t, h, {**labels, "board": board}, v) for n, t, h, labels, v in consumer.gauges()
        ]
    gauges += consumed
    snapshot = state.store.current()
    if snapshot is not None:
        age = (datetime.now(UTC) - snapshot.published_at).total_seconds()
        gauges += [
            (
                "toplist_snapshot_age_seconds",
                "gauge",
                "Seconds since the current snapshot was published.",
                {},
                age,
            ),
            (
                "toplist_snapshot_duration_seconds",
                "gauge",
                "How long the current snapshot took to publish.",
                {},
                snapshot.duration_ms / 1000.0,
            ),
            (
                "toplist_snapshot_as_of_seconds",
                "gauge",
                "as_of of the current snapshot, as a Unix time.",
                {},
                snapshot.as_of.timestamp(),
            ),
            (
                "toplist_snapshot_voids",
                "gauge",
                "Voided events the current snapshot reflects.",
                {},
                float(snapshot.void_count),
            ),
            (
                "toplist_snapshot_entries",
                "gauge",
                "Rows in the current snapshot.",
                {},
                float(snapshot.entry_count),
            ),
        ]
    return gauges


def _board_gauges() -> list[tuple[str, str, str, dict[str, str], float]]:
    """The other boards' ingest counts, dead letters and snapshot ages."""
    state = toplist()
    db = state.config.database
    gauges: list[tuple[str, str, str, dict[str, str], float]] = []
    rows = state.store.client.query(
        f"""
        SELECT board, _source, sum(accepted), sum(rejected) FROM {db}.ingest_batches
        WHERE board != 'charts' GROUP BY board, _source ORDER BY board, _source
        """
    ).result_rows
    for board, source, valid, rejected in rows:
        for outcome, value in (("valid", valid), ("rejected", rejected)):
            gauges.append(
                (
                    "toplist_board_messages_total",
                    "counter",
                    "Messages ingested for the other boards, by board, source and outcome"
                    " (a repeated event is valid and counts once on its board).",
                    {"board": board, "source": source, "outcome": outcome},
                    float(value),
                )
            )
    for board, store in state.boards.items():
        stream = STREAMS[board]
        dead = store.client.command(f"SELECT count() FROM {db}.{stream.dead_letters}")
        gauges.append(
            (
                "toplist_board_dead_letters",
                "gauge",
                "Messages in each other board's dead-letter table.",
                {"board": board},
                float(dead),
            )
        )
        current = store.current()
        if current is not None:
            gauges.append(
                (
                    "toplist_board_snapshot_age_seconds",
                    "gauge",
                    "Seconds since each other board's current snapshot was published.",
                    {"board": board},
                    (datetime.now(UTC) - current.published_at).total_seconds(),
                )
            )
    return gauges


@health.get("/metrics")
def metrics() -> Response:
    text = toplist().metrics.render(_data_gauges())
    return Response(text, mimetype="text/plain; version=0.0.4")
