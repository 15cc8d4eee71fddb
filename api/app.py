"""The Flask application factory: read API, internal API, health, metrics, the web page."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from flask import Flask, g, jsonify, request
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from api.boards import boards as boards_api
from api.charts import charts
from api.errors import ApiError
from api.health import health
from api.hot import HotPath
from api.internal import internal
from api.metrics import Metrics
from api.snapshots import FileSnapshotStore, SnapshotStore
from api.state import Toplist, toplist
from api.web import web
from toplist.boards import BOARDS
from toplist.config import Config
from toplist.engine import connect

if TYPE_CHECKING:
    from ingest.consumer import KafkaIngest

log = logging.getLogger(__name__)


def create_app(
    config: Config | None = None,
    metrics: Metrics | None = None,
    consumers: dict[str, KafkaIngest] | None = None,
    files: Path | None = None,
) -> Flask:
    """The app; with `files`, its snapshots are read from the snapshot files there (an API
    worker, api/workers.py) instead of the registry."""
    config = config or Config.from_env()
    stores = {
        board: FileSnapshotStore(board, files)
        if files is not None
        else SnapshotStore(
            board,
            lambda: connect(config),
            config.database,
            poll_seconds=min(config.cache_poll_seconds, config.refresh_seconds(board)),
        )
        for board in BOARDS
    }
    app = Flask(__name__)
    app.json.sort_keys = False
    app.extensions["toplist"] = Toplist(config, stores, metrics or Metrics(), dict(consumers or {}))

    app.wsgi_app = HotPath(app.wsgi_app, app.extensions["toplist"])  # type: ignore[method-assign]
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
