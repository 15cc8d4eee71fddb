"""Internal jobs (sql/0028 `internal_jobs`): work asked for over HTTP that takes longer than a
request, run by the publication stage, readable by any process.

`POST /internal/rebuild` checks a rebuild request here (`rebuild_request`) and queues it
(`submit`); the scheduler's job runner (publish/rebuild.py) takes queued jobs one at a time,
records their progress and their result or error (`record`); `GET /internal/jobs/<id>` reads
the latest state (`find`). A job is queued, running, then succeeded or failed.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from clickhouse_connect.driver.client import Client

from toplist.boards import BOARDS
from toplist.config import SCORINGS, Config
from toplist.snapshots import REGISTRY, iso, parse_time, utc

JOBS = "internal_jobs"
STATES = ("queued", "running", "succeeded", "failed")
# A scope as the shelves name them (api/boards.py): global, restaurant:<id> or city:<id>.
_SCOPE = re.compile(r"(?:global|(?:restaurant|city):[^\x00-\x1f\x7f]{1,128})")
_FIELDS = ("board", "scope", "from", "to", "scoring_version")


@dataclass(frozen=True)
class Job:
    job_id: str
    kind: str
    request: dict
    state: str
    done: int
    total: int
    result: dict | None
    error: str
    created_at: datetime
    updated_at: datetime

    def as_dict(self) -> dict[str, object]:
        return {
            "job_id": self.job_id,
            "kind": self.kind,
            "request": self.request,
            "state": self.state,
            "done": self.done,
            "total": self.total,
            "result": self.result,
            "error": self.error or None,
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
        }


class JobRequestError(ValueError):
    """A request for a job that cannot be run: `code`, a message for the caller, and the HTTP
    status that says why (400 a malformed request, 404 nothing to rebuild, 409 a request the
    snapshots' state refuses)."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.status = code, status


def _time(body: dict, name: str) -> datetime | None:
    value = body.get(name)
    if value is None:
        return None
    try:
        if not isinstance(value, str):
            raise ValueError
        return parse_time(value)
    except ValueError:
        raise JobRequestError(
            "invalid_time", f"{name} must be an RFC 3339 time such as 2026-12-01T00:00:00Z"
        ) from None


def rebuild_request(client: Client, config: Config, body: object) -> dict[str, object]:
    """A rebuild request, checked and completed with its defaults: the board (a board with
    scoring versions), the scope (`all` or one), from/to (the kept snapshots' as_of range,
    open where absent) and the scoring version (default TOPLIST_SCORING_VERSION)."""
    if not isinstance(body, dict):
        raise JobRequestError("invalid_request", "the body must be a JSON object")
    unknown = sorted(set(body) - set(_FIELDS))
    if unknown:
        raise JobRequestError(
            "invalid_request", f"unknown fields {unknown}; a rebuild takes {', '.join(_FIELDS)}"
        )
    board = body.get("board")
    if not isinstance(board, str) or board not in BOARDS:
        raise JobRequestError(
            "invalid_board", f"board must be one of {', '.join(BOARDS)}, got {board!r}"
        )
    if not BOARDS[board].scored:
        scored = [name for name, spec in BOARDS.items() if spec.scored]
        raise JobRequestError(
            "invalid_board",
            f"the {board} board has no scoring versions to rebuild (those that do:"
            f" {', '.join(scored)}); to recount it, void or rebuild its events and publish",
        )
    scope = body.get("scope", "all")
    if not isinstance(scope, str) or not (scope == "all" or _SCOPE.fullmatch(scope)):
        raise JobRequestError(
            "invalid_scope",
            f"scope must be all, global, restaurant:<id> or city:<id>, got {scope!r}",
        )
    version = body.get("scoring_version", config.scoring_version)
    if version not in SCORINGS:
        raise JobRequestError(
            "invalid_scoring_version",
            f"scoring_version must be one of {', '.join(SCORINGS)}, got {version!r}",
        )
    start, end = _time(body, "from"), _time(body, "to")
    request = {
        "board": board,
        "scope": scope,
        "from": iso(start) if start else None,
        "to": iso(end) if end else None,
        "scoring_version": version,
    }
    kept = kept_snapshots(client, config.database, request)
    if not kept:
        raise JobRequestError(
            "no_snapshots",
            f"no kept {board} snapshot has an as_of from {request['from'] or 'the first'}"
            f" to {request['to'] or 'the last'}",
            404,
        )
    lacking = [snapshot_id for snapshot_id, _, scorings in kept if version not in scorings]
    if scope != "all" and lacking:
        raise JobRequestError(
            "scoring_version_not_held",
            f"{len(lacking)} of the snapshots do not hold {version} yet: backfill it with"
            " scope all first (a snapshot holds a version for every scope or for none)",
            409,
        )
    return request


def kept_snapshots(
    client: Client, database: str, request: dict
) -> list[tuple[str, datetime, tuple[str, ...]]]:
    """The kept snapshots a rebuild covers, oldest as_of first: (snapshot_id, as_of, scorings)."""
    rows = client.query(
        f"""
        SELECT snapshot_id, as_of, scorings FROM {database}.{REGISTRY}
        WHERE board = {{board:String}}
          AND ({{start:Nullable(String)}} IS NULL
               OR as_of >= parseDateTime64BestEffort({{start:Nullable(String)}}, 3, 'UTC'))
          AND ({{end:Nullable(String)}} IS NULL
               OR as_of <= parseDateTime64BestEffort({{end:Nullable(String)}}, 3, 'UTC'))
        ORDER BY as_of, published_at, snapshot_id
        """,
        parameters={"board": request["board"], "start": request["from"], "end": request["to"]},
    ).result_rows
    return [(snapshot_id, utc(as_of), tuple(scorings)) for snapshot_id, as_of, scorings in rows]


_COLUMNS = ["job_id", "kind", "request", "state", "done", "total", "result", "error", "created_at"]


def submit(client: Client, database: str, kind: str, request: dict) -> Job:
    """Queue a job; its id is new."""
    now = datetime.now(UTC)
    job = Job(uuid.uuid4().hex, kind, request, "queued", 0, 0, None, "", now, now)
    _write(client, database, job)
    return job


def record(client: Client, database: str, job: Job, **changes: object) -> Job:
    """The job with `changes` (state, done, total, result, error), recorded."""
    job = replace(job, **changes, updated_at=datetime.now(UTC))  # type: ignore[arg-type]
    _write(client, database, job)
    return job


def _write(client: Client, database: str, job: Job) -> None:
    client.insert(
        f"{database}.{JOBS}",
        [
            [
                job.job_id,
                job.kind,
                json.dumps(job.request),
                job.state,
                job.done,
                job.total,
                json.dumps(job.result) if job.result is not None else "",
                job.error,
                job.created_at,
            ]
        ],
        column_names=_COLUMNS,
    )


_SELECT = f"""
    SELECT job_id, argMax(tuple({", ".join(_COLUMNS[1:])}, updated_at), updated_at) AS latest
    FROM {{database}}.{JOBS}
    {{where}}
    GROUP BY job_id
    {{having}}
"""


def _job(row: tuple) -> Job:
    job_id, (kind, request, state, done, total, result, error, created, updated) = row
    return Job(
        job_id,
        kind,
        json.loads(request),
        state,
        int(done),
        int(total),
        json.loads(result) if result else None,
        error,
        utc(created),
        utc(updated),
    )


def find(client: Client, database: str, job_id: str) -> Job | None:
    rows = client.query(
        _SELECT.format(database=database, where="WHERE job_id = {id:String}", having=""),
        parameters={"id": job_id},
    ).result_rows
    return _job(rows[0]) if rows else None


def _in_state(client: Client, database: str, state: str) -> list[Job]:
    """The jobs whose latest state is `state`, oldest first (read each second: the filter is
    the engine's, not a decode of every job kept)."""
    rows = client.query(
        _SELECT.format(database=database, where="", having="HAVING latest.3 = {state:String}"),
        parameters={"state": state},
    ).result_rows
    return sorted((_job(row) for row in rows), key=lambda job: job.created_at)


def queued(client: Client, database: str) -> list[Job]:
    """The jobs waiting to run, oldest first."""
    return _in_state(client, database, "queued")


def unfinished(client: Client, database: str) -> list[Job]:
    """The jobs recorded as running."""
    return _in_state(client, database, "running")
