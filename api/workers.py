"""API worker processes: `toplist serve --workers N` runs N of them under granian, a
production HTTP server, and none of them holds the engine.

The process that runs `toplist serve` owns the engine (embedded, one process owns a chDB data
directory): it migrates, consumes, publishes, writes each board's snapshot as a file
(toplist/snapshots.py) and serves the full app on a private port. Each worker reads the
snapshot files (in server mode without them, the registry), answers every read itself, and
hands what needs the engine to the engine process: `/internal/*` (corrections, publication
requests), a song's series (read from the buckets), a restaurant's shelf (its catalog,
featured items and fallback list are read when asked), and `/healthz` and `/metrics`, which
describe the whole service (the workers' request counters reach `/metrics` through
prometheus_client's multiprocess directory).
"""

from __future__ import annotations

import http.client
import json
import os
import pickle
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote, urlsplit

from flask import Flask

from api.hot import StartResponse, WSGIApp

CONFIG_ENV = "TOPLIST_WORKER_CONFIG"  # a pickled Config, written by the engine process
ENGINE_ENV = "TOPLIST_ENGINE_URL"  # where the engine process serves the full app
ENGINE_PATHS = ("/healthz", "/metrics")
ENGINE_PREFIX = "/internal/"
ENGINE_SUFFIX = "/series"  # a song's series is read from the buckets, not from a snapshot
ENGINE_SHELVES = "/v1/restaurants/"  # a restaurant's shelf reads the catalog and fallback list
# Not passed on: they describe one connection, not the request.
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "te"}


def create_worker_app() -> Flask:
    """The app of one worker process (granian's factory: `api.workers:create_worker_app`)."""
    from api.app import create_app

    config = pickle.loads(Path(os.environ[CONFIG_ENV]).read_bytes())
    app = create_app(config, files=config.snapshot_files)
    timeout = config.publish_wait_seconds + 30  # a correction may wait for its publication
    app.wsgi_app = ToEngine(app.wsgi_app, os.environ[ENGINE_ENV], timeout)  # type: ignore[method-assign]
    return app


class ToEngine:
    """WSGI middleware: requests for the engine process go there, the rest to `app`."""

    def __init__(self, app: WSGIApp, engine_url: str, timeout: float) -> None:
        parts = urlsplit(engine_url)
        self.app, self.host, self.port, self.timeout = app, parts.hostname, parts.port, timeout

    def __call__(self, environ: dict, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if not (
            path.startswith(ENGINE_PREFIX)
            or path in ENGINE_PATHS
            or (path.startswith("/v1/charts/") and path.endswith(ENGINE_SUFFIX))
            or path.startswith(ENGINE_SHELVES)
        ):
            return self.app(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length > 0 else None
        headers = {
            name[5:].replace("_", "-").title(): value
            for name, value in environ.items()
            if name.startswith("HTTP_") and name[5:].replace("_", "-").lower() not in HOP_BY_HOP
        }
        if environ.get("CONTENT_TYPE"):
            headers["Content-Type"] = environ["CONTENT_TYPE"]
        target = quote(path.encode("latin-1"), safe="/:@!$&'()*+,;=-._~")
        if environ.get("QUERY_STRING"):
            target += "?" + environ["QUERY_STRING"]
        connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            connection.request(environ["REQUEST_METHOD"], target, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
        except OSError as error:
            message = f"the engine process does not answer ({error}); is `toplist serve` running?"
            data = json.dumps({"error": {"code": "engine_unavailable", "message": message}})
            start_response(
                "503 SERVICE UNAVAILABLE",
                [("Content-Type", "application/json"), ("Cache-Control", "no-store")],
            )
            return [data.encode()]
        finally:
            connection.close()
        start_response(
            f"{response.status} {response.reason}",
            [(k, v) for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP],
        )
        return [data]
