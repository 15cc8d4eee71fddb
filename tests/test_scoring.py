"""Versioned scoring of the shelves end to end on the real engine: a scoring version
(macros/scoring.sql) backfilled over the kept snapshots by a rebuild job (POST /internal/rebuild,
run by the scheduler's job runner), its progress and result (GET /internal/jobs/<id>), the rank
overlap it reports against the default, and `?scoring_version=` on the shelf endpoints. Held to
tests/boards_reference.py."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from boards_reference import scored_shelves
from test_boards import load

from api.app import create_app
from ingest.board_events import ItemEventGenerator
from ingest.catalog import load_catalog
from publish.publisher import publish
from publish.rebuild import run_queued
from toplist.jobs import record, submit

NOW = datetime(2026, 12, 4, 12, 0, 30, tzinfo=UTC)
TOKEN = "scoring-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def overlap_of(events: list[dict], as_of: datetime, scopes: set[str] | None = None) -> dict:
    """The mean top-10 overlap of v2 with v1 over the restaurants' lists, per metric/window."""
    v1, v2 = scored_shelves(events, as_of, "v1"), scored_shelves(events, as_of, "v2")
    shares: dict[str, list[float]] = {}
    lowest_rows: list[dict] = []
    for shelf in sorted(set(v1) | set(v2)):
        scope, metric, window = shelf
        if not scope.startswith("restaurant:") or (scopes and scope not in scopes):
            continue
        a = {i for i, _ in v2.get(shelf, [])[:10]}
        b = {i for i, _ in v1.get(shelf, [])[:10]}
        share = len(a & b) / max(len(a), len(b))
        shares.setdefault(f"{metric}/{window}", []).append(share)
        lowest_rows.append(
            {"scope": scope, "metric": metric, "window": window, "overlap": round(share, 4)}
        )
    every = [share for values in shares.values() for share in values]
    lowest = sorted(
        lowest_rows, key=lambda row: (row["overlap"], row["scope"], row["metric"], row["window"])
    )
    return {
        "lowest": lowest[:5],
        "lists": len(every),
        "mean": round(sum(every) / len(every), 4),
        "by_list": {name: round(sum(v) / len(v), 4) for name, v in sorted(shares.items())},
    }


def test_a_scoring_version_is_backfilled_by_a_rebuild_job_and_then_served(client, config):
    config = replace(config, internal_token=TOKEN)
    generator = ItemEventGenerator(seed=31, restaurants=6, items_each=30)
    generated = generator.events(5_000, NOW - timedelta(hours=30), NOW)
    load(client, config.database, "popular", generated.lines)
    catalog = generator.catalog()
    load_catalog(client, config.database, [json.dumps(row) for row in catalog])
    minute = NOW.replace(second=0)  # the snapshots' as_ofs: 11:58, 11:59 and 12:00
    snapshots = [
        publish(client, config, board="popular", as_of=minute - timedelta(minutes=m))
        for m in (2, 1, 0)
    ]
    assert all(s.scorings == ("v1",) for s in snapshots)
    api = create_app(config).test_client()
    shelf = "/v1/topk?scope=restaurant:r01&metric=orders&window=1d&k=5"

    # Not published with v2 yet: asked for, a 404 that says what the snapshot holds.
    answer = api.get(shelf + "&scoring_version=v2")
    assert answer.status_code == 404
    assert answer.get_json()["error"]["code"] == "scoring_version_not_published"
    assert api.get(shelf + "&scoring_version=v9").get_json()["error"]["code"] == (
        "invalid_scoring_version"
    )

    # Requests that cannot be run: a clear 400 each, and no job.
    for body, status, code in [
        ({"board": "charts"}, 400, "invalid_board"),
        ({"board": "nope"}, 400, "invalid_board"),
        ({"board": {}}, 400, "invalid_board"),
        ({"board": "popular", "scope": "town:x"}, 400, "invalid_scope"),
        ({"board": "popular", "scoring_version": "v9"}, 400, "invalid_scoring_version"),
        ({"board": "popular", "from": "yesterday"}, 400, "invalid_time"),
        ({"board": "popular", "window": "1d"}, 400, "invalid_request"),
        ([], 400, "invalid_request"),
        ({"board": "popular", "to": "2020-01-01T00:00:00Z"}, 404, "no_snapshots"),
        (
            {"board": "popular", "from": "2026-12-04T12:00:00Z", "to": "2026-12-04T11:00:00Z"},
            404,
            "no_snapshots",
        ),
        (
            {"board": "popular", "scope": "restaurant:r01", "scoring_version": "v2"},
            409,
            "scoring_version_not_held",
        ),
    ]:
        answer = api.post("/internal/rebuild", json=body, headers=AUTH)
        assert answer.status_code == status, body
        assert answer.get_json()["error"]["code"] == code, body
    assert api.post("/internal/rebuild", json={"board": "popular"}).status_code == 401
    assert api.get("/internal/jobs/nope", headers=AUTH).status_code == 404

    # A job left running by a process that stopped: the runner's first run says so.
    left = record(
        client, config.database, submit(client, config.database, "rebuild", {}), state="running"
    )

    # The backfill: queued, run by the job runner, then its result.
    answer = api.post(
        "/internal/rebuild", json={"board": "popular", "scoring_version": "v2"}, headers=AUTH
    )
    assert answer.status_code == 202
    job_id = answer.get_json()["job_id"]
    assert answer.headers["Location"] == f"/internal/jobs/{job_id}"
    queued = api.get(f"/internal/jobs/{job_id}", headers=AUTH).get_json()
    assert (queued["state"], queued["done"], queued["result"]) == ("queued", 0, None)
    assert queued["request"] == {
        "board": "popular",
        "scope": "all",
        "from": None,
        "to": None,
        "scoring_version": "v2",
    }
    assert run_queued(config) == 1
    job = api.get(f"/internal/jobs/{job_id}", headers=AUTH).get_json()
    assert (job["state"], job["done"], job["total"], job["error"]) == ("succeeded", 3, 3, None)
    interrupted = api.get(f"/internal/jobs/{left.job_id}", headers=AUTH).get_json()
    assert interrupted["state"] == "failed" and interrupted["error"].startswith("interrupted")
    result = job["result"]
    assert result["snapshots"] == 3
    written = client.command(
        f"SELECT count() FROM {config.database}.board_entries WHERE scoring = 'v2'"
    )
    assert result["entries"] == written > 0
    as_of = NOW.replace(second=0)
    expected = overlap_of(generated.events, as_of)
    overlap = result["overlap"]
    assert (overlap["against"], overlap["top"]) == ("v1", 10)
    assert overlap["snapshot_id"] == snapshots[-1].snapshot_id
    assert {k: overlap[k] for k in expected} == expected
    assert 0 < overlap["mean"] < 1  # v2 reorders some restaurants' top 10, not all
    assert overlap["lowest"][0]["overlap"] == min(row["overlap"] for row in overlap["lowest"])

    # Every kept snapshot now holds v2, and it is served on request, beside v1.
    held = client.query(
        f"SELECT DISTINCT scorings FROM {config.database}.board_snapshots WHERE board = 'popular'"
    ).result_rows
    assert held == [(["v1", "v2"],)]
    hidden = {r["item_id"] for r in catalog if not r["available"] or r["deleted"]}
    for version in ("v1", "v2"):
        truth = scored_shelves(generated.events, as_of, version)
        body = api.get(shelf + f"&scoring_version={version}").get_json()
        assert body["scoring_version"] == version
        expected_items = [
            (i, s) for i, s in truth[("restaurant:r01", "orders", "1d")] if i not in hidden
        ][:5]
        assert [(row["item_id"], row["orders"]) for row in body["items"]] == expected_items
        restaurant = api.get(
            f"/v1/restaurants/r01/popular-items?k=5&scoring_version={version}"
        ).get_json()
        assert [(row["item_id"], row["score"]) for row in restaurant["items"]] == expected_items
        assert restaurant["scoring_version"] == version
    # An earlier snapshot holds it too, as its own as_of scores it.
    earlier = snapshots[0]
    rows = client.query(
        f"SELECT item_id, score FROM {config.database}.board_entries"
        " WHERE snapshot_id = {id:String} AND scoring = 'v2' AND scope = 'restaurant:r01'"
        " AND metric = 'orders' AND window_name = '1d' ORDER BY rank",
        parameters={"id": earlier.snapshot_id},
    ).result_rows
    truth = scored_shelves(generated.events, earlier.as_of, "v2")
    assert rows == truth[("restaurant:r01", "orders", "1d")]

    # One restaurant, one snapshot, again: the job covers just those.
    answer = api.post(
        "/internal/rebuild",
        json={
            "board": "popular",
            "scope": "restaurant:r01",
            "scoring_version": "v2",
            "from": "2026-12-04T11:59:00Z",
            "to": "2026-12-04T11:59:00Z",
        },
        headers=AUTH,
    )
    assert answer.status_code == 202
    assert run_queued(config) == 1
    job = api.get(f"/internal/jobs/{answer.get_json()['job_id']}", headers=AUTH).get_json()
    assert (job["state"], job["result"]["snapshots"]) == ("succeeded", 1)
    one = overlap_of(generated.events, as_of - timedelta(minutes=1), {"restaurant:r01"})
    assert {k: job["result"]["overlap"][k] for k in one} == one

    # The default switched: shelves answer with v2 unless asked otherwise.
    switched = create_app(replace(config, scoring_version="v2")).test_client()
    assert switched.get(shelf).get_json()["scoring_version"] == "v2"
    assert api.get(shelf).get_json()["scoring_version"] == "v1"
