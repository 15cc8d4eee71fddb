"""The hot path: a read answered before, asked again, is answered without Flask.

An answer drawn from a snapshot is fixed by the raw request (path and query string), the
snapshot and whether the snapshot is stale. api/charts.py `from_snapshot` keeps each one it
encodes under its raw request (api/snapshots.py `Answers`); `HotPath`, in front of the Flask
app, answers a repeated GET from it (with the same ETag, Cache-Control and 304s) while the
board's current snapshot and its staleness are still those it was drawn from, and hands
everything else to Flask, which answers and keeps the new answer. Flask's routing, request
objects and JSON encoding cost most of a read; a lookup costs a few microseconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from werkzeug.http import parse_etags

from api.charts import freshness

if TYPE_CHECKING:
    from api.snapshots import Answer
    from api.state import Toplist

StartResponse = Callable[..., object]
WSGIApp = Callable[[dict, StartResponse], Iterable[bytes]]


class HotPath:
    """WSGI middleware: repeated reads from `state.answers`, everything else to `app`."""

    def __init__(self, app: WSGIApp, state: Toplist) -> None:
        self.app, self.state = app, state

    def __call__(self, environ: dict, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") == "GET":
            started = time.perf_counter()
            answer = self.state.answers.get(environ)
            if answer is not None and answer.store.current() is answer.snapshot:
                stale, etag, headers = freshness(self.state.config, answer.snapshot)
                if stale == answer.stale:
                    return self._answer(environ, start_response, answer, etag, headers, started)
        return self.app(environ, start_response)

    def _answer(
        self,
        environ: dict,
        start_response: StartResponse,
        answer: Answer,
        etag: str,
        headers: dict[str, str],
        started: float,
    ) -> Iterable[bytes]:
        match = environ.get("HTTP_IF_NONE_MATCH")
        if match and parse_etags(match).contains_weak(etag):
            status, body = 304, b""
            start_response("304 NOT MODIFIED", list(headers.items()))
        else:
            status, body = 200, answer.body
            start_response(
                "200 OK",
                [
                    ("Content-Type", "application/json"),
                    ("Content-Length", str(len(body))),
                    *headers.items(),
                ],
            )
        self.state.metrics.observe_request(answer.endpoint, status, time.perf_counter() - started)
        return [body]
