"""GET /v1/charts/<scope>, GET /v1/charts/<scope>/songs/<song_id> (DESIGN.md "Read API"),
GET /v1/charts/<scope>/songs/<song_id>/around (the song with its neighbours) and
GET /v1/charts/<scope>/songs/<song_id>/series (its listens over the window, for the page).

Every answer drawn from a snapshot can be cached until the next publication: its ETag is
the snapshot_id (with "-stale" once the snapshot is stale, so a cached copy never hides the
warning), `Cache-Control: public, max-age` runs to when the next publication is due, and a
request with a matching `If-None-Match` gets 304. A CDN or a browser can absorb read load.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from flask import Blueprint, Response, current_app, jsonify, request

from api.errors import ApiError
from api.snapshots import Answer, Board, Entry, SnapshotStore
from api.state import toplist
from toplist.boards import CHARTS
from toplist.config import POLICIES, WINDOW_SECONDS, WINDOWS, Config
from toplist.snapshots import Snapshot, iso

charts = Blueprint("charts", __name__)

# fullmatch: "$" alone would let a trailing newline through
_SCOPE = re.compile(r"[A-Z]{2}|global")
_DIGITS = re.compile(r"[0-9]{1,7}")


def _scope(scope: str) -> str:
    if not _SCOPE.fullmatch(scope):
        raise ApiError(
            400,
            "invalid_scope",
            f"scope must be an upper-case ISO 3166-1 alpha-2 country code or 'global',"
            f" got {scope!r}",
        )
    return scope


def _window() -> str:
    window = request.args.get("window", "24h")
    if window not in WINDOWS:
        raise ApiError(
            400, "invalid_window", f"window must be one of {', '.join(WINDOWS)}, got {window!r}"
        )
    return window


def _int_arg(name: str, default: int, low: int, high: int, why: str = "") -> int:
    """The request's integer `name`: absent gives the default; anything but low..high is a
    400 `invalid_<name>`."""
    raw = request.args.get(name)
    if raw is None:
        return default
    if not _DIGITS.fullmatch(raw) or not low <= int(raw) <= high:
        raise ApiError(
            400,
            f"invalid_{name}",
            f"{name} must be an integer from {low} to {high}{why}, got {raw!r}",
        )
    return int(raw)


def parse_k(default: int, k_max: int) -> int:
    """The request's k: absent gives the default; anything but 1..k_max is a 400."""
    return _int_arg("k", default, 1, k_max)


# ?n= of an around-me request: the entries asked for on each side.
N_MAX = 100


def parse_n() -> int:
    """The request's n: absent gives 5; anything but 1..N_MAX is a 400."""
    return _int_arg("n", 5, 1, N_MAX)


def parse_offset(depth: int) -> int:
    """The request's offset (pages): absent gives 0; anything but 0..depth is a 400."""
    return _int_arg("offset", 0, 0, depth, " (the depth a snapshot keeps)")


def _k() -> int:
    config = toplist().config
    return parse_k(config.default_k, config.k_max)


def _policy(snapshot: Snapshot) -> str:
    """?policy=, by default the configured one; it must be one the snapshot was ranked with."""
    policy = request.args.get("policy", toplist().config.policy)
    if policy not in POLICIES:
        raise ApiError(
            400, "invalid_policy", f"policy must be one of {', '.join(POLICIES)}, got {policy!r}"
        )
    if policy not in snapshot.policies:
        raise ApiError(
            404,
            "policy_not_published",
            f"snapshot {snapshot.snapshot_id} was ranked with {', '.join(snapshot.policies)}"
            f" only, not {policy}",
        )
    return policy


def current(board: str) -> Snapshot:
    """The board's current snapshot, or a 503 before its first publication."""
    snapshot = toplist().stores[board].current()
    if snapshot is None:
        raise ApiError(
            503,
            "no_snapshot",
            f"no {board} snapshot has been published yet; the board appears after the first"
            " publication",
        )
    return snapshot


def _store() -> SnapshotStore:
    return toplist().stores[CHARTS.name]


def _chart(snapshot: Snapshot, policy: str, window: str, scope: str) -> Board:
    return _store().board(snapshot, "listens", window, scope, policy)


def snapshot_header(snapshot: Snapshot, policy: str | None, stale: bool) -> dict[str, object]:
    return {
        "as_of": iso(snapshot.as_of),
        "snapshot_id": snapshot.snapshot_id,
        "policy": policy or snapshot.policy,
        "published_at": iso(snapshot.published_at),
        "stale": stale,
    }


def freshness(config: Config, snapshot: Snapshot) -> tuple[bool, str, dict[str, str]]:
    """Whether `snapshot` is stale now, its ETag, and the headers of an answer drawn from it:
    cacheable until the board's next publication is due."""
    age = (datetime.now(UTC) - snapshot.published_at).total_seconds()
    stale = age > config.stale_after(snapshot.board)
    etag = snapshot.snapshot_id + ("-stale" if stale else "")
    max_age = max(0, math.floor(config.refresh_seconds(snapshot.board) - age))
    return stale, etag, {"ETag": f'"{etag}"', "Cache-Control": f"public, max-age={max_age}"}


def from_snapshot(
    snapshot: Snapshot, key: tuple, body: Callable[[bool], dict[str, object]]
) -> Response:
    """The JSON answer `body(stale)`, cacheable until the board's next publication is due, or
    304 if unchanged. The encoded answer is kept per snapshot, request `key` and staleness,
    so a repeated read is a lookup (and, by its raw request, api/hot.py's)."""
    state = toplist()
    stale, etag, headers = freshness(state.config, snapshot)
    if request.if_none_match.contains_weak(etag):  # GET compares weakly (RFC 9110 13.1.2)
        return current_app.response_class(status=304, headers=headers)
    store = state.stores[snapshot.board]
    encoded = store.memo(snapshot, (*key, stale), lambda: jsonify(body(stale)).get_data())
    endpoint = request.url_rule.rule if request.url_rule else "unmatched"
    state.answers.keep(request.environ, Answer(store, snapshot, stale, encoded, endpoint))
    return current_app.response_class(encoded, headers=headers, mimetype="application/json")


@charts.get("/v1/charts/<scope>")
def chart(scope: str):  # type: ignore[no-untyped-def]
    scope, window, k = _scope(scope), _window(), _k()
    offset = parse_offset(toplist().config.keep_top)
    snapshot = current(CHARTS.name)
    policy = _policy(snapshot)

    def body(stale: bool) -> dict[str, object]:
        board = _chart(snapshot, policy, window, scope)
        return {
            "scope": scope,
            "window": window,
            "k": k,
            **snapshot_header(snapshot, policy, stale),
            "items": [_song(e) for e in board.page(k, offset)],
        }

    return from_snapshot(snapshot, ("chart", policy, window, scope, k, offset), body)


def _song(entry: Entry) -> dict[str, object]:
    return {
        "rank": entry.rank,
        "song_id": entry.item_id,
        "listens": entry.score,
        **entry.movement(),
    }


def _not_ranked(snapshot: Snapshot, song_id: str, scope: str, window: str) -> ApiError:
    return ApiError(
        404,
        "song_not_ranked",
        f"song {song_id!r} has no listens in {scope} for window {window} in snapshot"
        f" {snapshot.snapshot_id} (snapshots keep the top {snapshot.keep_top} per board)",
    )


@charts.get("/v1/charts/<scope>/songs/<path:song_id>/around")
def song_around(scope: str, song_id: str):  # type: ignore[no-untyped-def]
    """The song with the n entries above and below it on its chart (within the kept depth)."""
    scope, window, n = _scope(scope), _window(), parse_n()
    snapshot = current(CHARTS.name)
    policy = _policy(snapshot)
    around = _chart(snapshot, policy, window, scope).around(song_id, n)
    if around is None:
        raise _not_ranked(snapshot, song_id, scope, window)
    centre = next(e for e in around if e.item_id == song_id)
    return from_snapshot(
        snapshot,
        ("around", policy, window, scope, song_id, n),
        lambda stale: {
            "scope": scope,
            "window": window,
            "n": n,
            **snapshot_header(snapshot, policy, stale),
            "song_id": song_id,
            "rank": centre.rank,
            "items": [_song(e) for e in around],
        },
    )


def _ranked_song(scope: str, song_id: str) -> tuple[str, str, Snapshot, str, Entry]:
    """The request's scope and window, the current snapshot and policy, and the song's entry
    on that chart (a 404 when it has none)."""
    scope, window = _scope(scope), _window()
    snapshot = current(CHARTS.name)
    policy = _policy(snapshot)
    entry = _chart(snapshot, policy, window, scope).by_item.get(song_id)
    if entry is None:
        raise _not_ranked(snapshot, song_id, scope, window)
    return scope, window, snapshot, policy, entry


# A series' step per window: 10 minutes across the last hour, hours up to 30 days, days for
# `all` (back to the song's first listen).
SERIES_STEP = {"1h": 600, "all": 86400}


@charts.get("/v1/charts/<scope>/songs/<path:song_id>/series")
def song_series(scope: str, song_id: str):  # type: ignore[no-untyped-def]
    """A ranked song's listens per hour over its window (10 minutes for 1h, days for all),
    from the buckets at the snapshot's as_of: what the page plots."""
    scope, window, snapshot, policy, entry = _ranked_song(scope, song_id)
    step = SERIES_STEP.get(window, 3600)
    length = WINDOW_SECONDS[window]
    steps = None if length is None else length // step

    def body(stale: bool) -> dict[str, object]:
        counts = _store().series(snapshot, scope, song_id, step, steps)
        first = snapshot.as_of - timedelta(seconds=step * len(counts))
        return {
            "scope": scope,
            "window": window,
            **snapshot_header(snapshot, policy, stale),
            "song_id": song_id,
            "listens": entry.score,
            "step_seconds": step,
            "points": [
                {"start": iso(first + timedelta(seconds=step * at)), "listens": count}
                for at, count in enumerate(counts)
            ],
        }

    return from_snapshot(snapshot, ("series", policy, window, scope, song_id), body)


@charts.get("/v1/charts/<scope>/songs/<path:song_id>")
def song_rank(scope: str, song_id: str):  # type: ignore[no-untyped-def]
    scope, window, snapshot, policy, entry = _ranked_song(scope, song_id)
    return from_snapshot(
        snapshot,
        ("song", policy, window, scope, song_id),
        lambda stale: {
            "scope": scope,
            "window": window,
            **snapshot_header(snapshot, policy, stale),
            **_song(entry),
        },
    )


@charts.get("/v1/scopes")
def scopes():  # type: ignore[no-untyped-def]
    """The scopes with a board in the current snapshot, the policies it was ranked with and
    the voids it reflects (for pickers such as the web page)."""
    snapshot = current(CHARTS.name)
    return from_snapshot(
        snapshot,
        ("scopes",),
        lambda stale: {
            **snapshot_header(snapshot, None, stale),
            "policies": list(snapshot.policies),
            "void_count": snapshot.void_count,
            "scopes": _store().scopes(snapshot),
        },
    )
