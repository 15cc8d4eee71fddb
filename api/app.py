"""The Flask application factory: read API, internal API, health, metrics, the web page."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from flask import Flask, current_app, g, jsonify, request
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from api.metrics import Metrics
from api.snapshots import BoardStore, SnapshotStore
from toplist.config import BOARDS, Config
from toplist.engine import connect

if TYPE_CHECKING:
    from ingest.consumer import KafkaIngest

log = logging.getLogger(__name__)


class ApiError(HTTPException):
    """An error with a machine-readable code, rendered as {"error": {"code", "message"}}."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(description=message)
        self.code = status
        self.error_code = code


@dataclass
class Toplist:
    """What the request handlers share: configuration, the snapshot cache, the metrics, and
    the embedded Kafka consumer when this process runs one."""

    config: Config
    store: SnapshotStore
    metrics: Metrics = field(default_factory=Metrics)
    ingest: KafkaIngest | None = None
    # The other boards' snapshot caches, by board (live listeners, sale, popular).
    boards: dict[str, BoardStore] = field(default_factory=dict)
    # The other boards' embedded Kafka consumers, by board, when this process runs them.
    board_ingest: dict[str, KafkaIngest] = field(default_factory=dict)

    def close(self) -> None:
        for store in (self.store, *self.boards.values()):
            store.close()


def toplist() -> Toplist:
    return current_app.extensions["toplist"]


def create_app(
    config: Config | None = None,
    store: SnapshotStore | None = None,
    metrics: Metrics | None = None,
    ingest: KafkaIngest | None = None,
    board_ingest: dict[str, KafkaIngest] | None = None,
) -> Flask:
    config = config or Config.from_env()
    store = store or SnapshotStore(
        lambda: connect(config), config.database, poll_seconds=config.cache_poll_seconds
    )
    app = Flask(__name__)
    app.json.sort_keys = False
    boards = {
        board: BoardStore(
            board,
            lambda: connect(config),
            config.database,
            poll_seconds=min(config.cache_poll_seconds, config.refresh_seconds(board)),
        )
        for board in BOARDS
    }
    app.extensions["toplist"] = Toplist(
        config, store, metrics or Metrics(), ingest, boards, dict(board_ingest or {})
    )

    from api.boards import boards as boards_api
    from api.charts import charts
    from api.health import health
    from api.internal import internal
    from api.web import web

    app.register_blueprint(charts)
    app.register_blueprint(boards_api)
    app.register_blueprint(health)
    app.register_blueprint(internal)
    app.register_blueprint(web)

    @app.before_request
    def start_timer() -> None:
        g.started = time.perf_counter()

    @app.after_request
    def observe(response):  # type: ignore[no-untyped-def]
        endpoint = request.url_rule.rule if request.url_rule else "unmatched"
        started = g.get("started", time.perf_counter())
        toplist().metrics.observe_request(
            endpoint, response.status_code, time.perf_counter() - started
        )
        return response

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException):  # type: ignore[no-untyped-def]
        code = getattr(error, "error_code", None) or (error.name or "error").lower().replace(
            " ", "_"
        )
        response = jsonify({"error": {"code": code, "message": error.description}})
        response.status_code = error.code or 500
        response.cache_control.no_store = True  # e.g. a 503 before the first snapshot
        if isinstance(error, MethodNotAllowed) and error.valid_methods:
            response.headers["Allow"] = ", ".join(error.valid_methods)
        if isinstance(error, ApiError) and error.code == 401:
            response.headers["WWW-Authenticate"] = 'Bearer realm="toplist-internal"'
        return response

    @app.errorhandler(Exception)
    def unexpected_error(error: Exception):  # type: ignore[no-untyped-def]
        log.exception("unhandled error serving %s", request.path)
        response = jsonify(
            {"error": {"code": "internal_error", "message": "internal error; see the server log"}}
        )
        response.status_code = 500
        response.cache_control.no_store = True
        return response

    return app
