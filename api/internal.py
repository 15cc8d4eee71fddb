"""POST /internal/corrections: void event ids of a board over HTTP (what `toplist void` does),
by token. POST /internal/rebuild: queue a rebuild job (a scoring version backfilled over the
kept snapshots: publish/rebuild.py, run by the scheduler); GET /internal/jobs/<id>: its state,
progress and result.

Internal endpoints answer only to `Authorization: Bearer <TOPLIST_INTERNAL_TOKEN>`; with no
token configured they refuse every request, so an unconfigured deployment is closed, not open.
"""

from __future__ import annotations

import hmac

from flask import Blueprint, jsonify, request

from api.errors import ApiError
from api.state import toplist
from toplist.boards import CHARTS, VOIDABLE
from toplist.corrections import void_events
from toplist.engine import connect
from toplist.jobs import JobRequestError, find, rebuild_request, submit
from toplist.snapshots import request_publication, wait_for_publication

internal = Blueprint("internal", __name__, url_prefix="/internal")

MAX_IDS = 100_000
# DESIGN.md: an event_id is 1-128 bytes. Longer ids (in bytes) cannot have been accepted, so
# the request may hold them; they come back as not_found.
MAX_ID_CHARS = 128
MAX_REASON_CHARS = 256


@internal.before_request
def require_token() -> None:
    expected = toplist().config.internal_token
    if not expected:
        raise ApiError(
            401,
            "unauthorized",
            "internal endpoints are disabled: no TOPLIST_INTERNAL_TOKEN is configured",
        )
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        given.strip().encode(), expected.encode()
    ):
        raise ApiError(401, "unauthorized", "send Authorization: Bearer <TOPLIST_INTERNAL_TOKEN>")


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate, sent as a JSON \udxxx escape
        return False
    return True


def _corrections_request() -> tuple[list[str], str, bool, str]:
    try:
        body = request.get_json(silent=True)
    except RecursionError:  # nested deeper than Python's JSON decoder goes: not a request
        body = None
    if not isinstance(body, dict):
        raise ApiError(
            400, "invalid_body", 'send a JSON object: {"event_ids": [...], "reason": "..."}'
        )
    ids, reason, publish = body.get("event_ids"), body.get("reason"), body.get("publish", False)
    if (
        not isinstance(ids, list)
        or not 1 <= len(ids) <= MAX_IDS
        or not all(isinstance(i, str) and 1 <= len(i) <= MAX_ID_CHARS and _utf8(i) for i in ids)
    ):
        raise ApiError(
            400,
            "invalid_event_ids",
            f"event_ids must be a list of 1 to {MAX_IDS:,} strings of 1-{MAX_ID_CHARS} characters",
        )
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON_CHARS:
        raise ApiError(
            400,
            "invalid_reason",
            f"reason must be a non-blank string of at most {MAX_REASON_CHARS} characters"
            " (for example 'fraud' or 'test traffic')",
        )
    if not isinstance(publish, bool):
        raise ApiError(400, "invalid_publish", "publish must be true or false")
    board = body.get("board", CHARTS.name)
    if board not in VOIDABLE:
        raise ApiError(
            400,
            "invalid_board",
            f"board must be one of {', '.join(VOIDABLE)} (the boards that count events),"
            f" got {board!r}",
        )
    return ids, reason.strip(), publish, board  # void_events counts a repeated id once


@internal.post("/corrections")
def corrections():  # type: ignore[no-untyped-def]
    """Void events; with "publish": true, ask the publisher for a corrected snapshot and wait
    for it (TOPLIST_PUBLISH_WAIT_SECONDS) before answering. The API never publishes itself."""
    ids, reason, publish, board = _corrections_request()
    state = toplist()
    config = state.config
    client = connect(config)
    try:
        result = void_events(client, config.database, ids, reason, board=board)
        body: dict[str, object] = {**result.as_dict(), "snapshot": None}
        if publish:
            requested = request_publication(client, config.database, board, "corrections")
            snapshot = wait_for_publication(
                client, config.database, board, requested, config.publish_wait_seconds
            )
            if snapshot is None:
                body["publish_error"] = (
                    "the voids are recorded and a corrected snapshot was requested, but the"
                    f" publisher published none within {config.publish_wait_seconds:g} s"
                    " (is `toplist schedule` or `toplist serve --publish-every` running?);"
                    " the next publication will include them"
                )
            else:
                state.stores[board].invalidate()
                body["snapshot"] = snapshot.as_dict()
    finally:
        client.close()
    return jsonify(body)


@internal.post("/rebuild")
def rebuild():  # type: ignore[no-untyped-def]
    """Queue a rebuild: {"board", "scope", "from", "to", "scoring_version"}, all but board
    optional. 202 with the job's id; the scheduler runs it (`toplist serve`, `toplist schedule`)."""
    try:
        body = request.get_json(silent=True)
    except RecursionError:
        body = None
    config = toplist().config
    client = connect(config)
    try:
        try:
            checked = rebuild_request(client, config, body)
        except JobRequestError as error:
            raise ApiError(error.status, error.code, str(error)) from None
        job = submit(client, config.database, "rebuild", checked)
    finally:
        client.close()
    response = jsonify({"job_id": job.job_id, "state": job.state, "request": checked})
    response.status_code = 202
    response.headers["Location"] = f"/internal/jobs/{job.job_id}"
    return response


@internal.get("/jobs/<job_id>")
def job_state(job_id: str):  # type: ignore[no-untyped-def]
    """A job's state (queued, running, succeeded, failed), progress and result or error."""
    config = toplist().config
    client = connect(config)
    try:
        job = find(client, config.database, job_id)
    finally:
        client.close()
    if job is None:
        raise ApiError(404, "job_not_found", f"no job {job_id!r} (jobs are kept 30 days)")
    return jsonify(job.as_dict())
