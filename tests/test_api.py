"""The read API on the real engine: charts, rank lookup, errors, 503, failed publications."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from api.app import create_app
from ingest.generator import Listen
from ingest.load import load_lines
from publish.publisher import PublishError, publish
from publish.scheduler import publish_job, start_scheduler, stop_scheduler

AS_OF = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def listens_for(song_counts: dict[str, int], country: str = "SE") -> list[str]:
    lines = []
    for song_id, count in song_counts.items():
        for i in range(count):
            moment = AS_OF - timedelta(minutes=30, seconds=i)
            lines.append(
                Listen(f"{country}-{song_id}-{i}", song_id, f"u{i}", country, moment).to_json()
            )
    return lines


@contextmanager
def aggregates_missing(client, config):
    """Break the ranking step for real: its input table is gone while this block runs."""
    db = config.database
    client.command(f"RENAME TABLE {db}.listens_by_10m TO {db}.listens_by_10m_away")
    try:
        yield
    finally:
        client.command(f"RENAME TABLE {db}.listens_by_10m_away TO {db}.listens_by_10m")


@pytest.fixture
def app(client, config):
    app = create_app(config)
    yield app
    app.extensions["toplist"].close()


@pytest.fixture
def api(app):
    return app.test_client()


@pytest.fixture
def published(client, config):
    """Fifteen songs in SE: song-00 has 15 listens, song-01 14, ... song-14 1."""
    load_lines(client, config.database, listens_for({f"song-{i:02d}": 15 - i for i in range(15)}))
    return publish(client, config, AS_OF)


def error_of(response) -> dict:
    body = response.get_json()
    assert body and "error" in body, f"expected a JSON error, got {response.data[:200]!r}"
    assert set(body["error"]) == {"code", "message"}
    return body["error"]


def test_503_before_the_first_snapshot(api):
    response = api.get("/v1/charts/SE")
    assert response.status_code == 503, "an empty board must not pass for a real one"
    assert error_of(response)["code"] == "no_snapshot"
    assert api.get("/v1/charts/SE/songs/x").status_code == 503
    health = api.get("/healthz")
    assert health.status_code == 200 and health.get_json()["boards"]["charts"] is None


def test_chart_serves_the_snapshot_in_the_documented_shape(api, published):
    response = api.get("/v1/charts/SE?window=24h&k=3")
    assert response.status_code == 200
    body = response.get_json()
    assert list(body) == [
        "scope",
        "window",
        "k",
        "as_of",
        "snapshot_id",
        "policy",
        "published_at",
        "stale",
        "items",
    ]
    assert body["as_of"] == "2026-12-01T12:00:00Z"
    assert body["snapshot_id"] == published.snapshot_id
    assert body["policy"] == "v1" and body["stale"] is False
    first = {"move": "new", "streak": 1}  # the first publication: every entry is new
    assert body["items"] == [
        {"rank": 1, "song_id": "song-00", "listens": 15, **first, "peak_rank": 1},
        {"rank": 2, "song_id": "song-01", "listens": 14, **first, "peak_rank": 2},
        {"rank": 3, "song_id": "song-02", "listens": 13, **first, "peak_rank": 3},
    ]
    default = api.get("/v1/charts/global").get_json()
    assert default["window"] == "24h" and default["k"] == 10 and len(default["items"]) == 10


def test_valid_scope_without_listens_is_an_empty_board(api, published):
    body = api.get("/v1/charts/NO?window=1h").get_json()
    assert body["items"] == [] and body["scope"] == "NO"


def test_rank_lookup_beyond_k(api, published):
    body = api.get("/v1/charts/SE/songs/song-12?window=24h").get_json()
    assert (body["rank"], body["listens"]) == (13, 3), "ranks beyond the top 10 must be exact"
    missing = api.get("/v1/charts/SE/songs/never-played")
    assert missing.status_code == 404 and error_of(missing)["code"] == "song_not_ranked"
    assert api.get("/v1/charts/DE/songs/song-00").status_code == 404


BAD_REQUESTS = [
    ("/v1/charts/SE?window=2h", "invalid_window"),
    ("/v1/charts/SE?window=", "invalid_window"),
    ("/v1/charts/SE?k=0", "invalid_k"),
    ("/v1/charts/SE?k=1001", "invalid_k"),
    ("/v1/charts/SE?k=ten", "invalid_k"),
    ("/v1/charts/SE?k=1.5", "invalid_k"),
    ("/v1/charts/SE?k=-1", "invalid_k"),
    ("/v1/charts/se", "invalid_scope"),
    ("/v1/charts/SWE", "invalid_scope"),
    ("/v1/charts/Global", "invalid_scope"),
    ("/v1/charts/S%20E", "invalid_scope"),
    ("/v1/charts/SE%0A", "invalid_scope"),  # a trailing newline, which a plain "$" lets by
    ("/v1/charts/SE?k=5%0A", "invalid_k"),
    ("/v1/charts/SE/songs/x?window=month", "invalid_window"),
    ("/v1/charts/1/songs/x", "invalid_scope"),
]


def test_bad_parameters_get_400_with_a_json_error(api, published):
    for path, code in BAD_REQUESTS:
        response = api.get(path)
        assert response.status_code == 400, f"{path} must be a client error, not {response.status}"
        assert error_of(response)["code"] == code, path


def test_unknown_routes_get_json_errors(api):
    response = api.get("/v2/nothing")
    assert response.status_code == 404 and error_of(response)["code"] == "not_found"
    response = api.post("/v1/charts/SE")
    assert response.status_code == 405 and error_of(response)["code"] == "method_not_allowed"


def test_failed_publication_midway_keeps_the_previous_snapshot(api, client, config, published):
    load_lines(client, config.database, listens_for({"song-new": 100}))

    def crash(snapshot_id: str) -> None:
        raise RuntimeError("disk full (simulated) after the entries were written")

    with pytest.raises(RuntimeError, match="disk full"):
        publish(client, config, AS_OF + timedelta(minutes=10), before_commit=crash)
    body = api.get("/v1/charts/SE").get_json()
    assert body["snapshot_id"] == published.snapshot_id, "a failed run replaced the board"
    assert body["items"][0]["song_id"] == "song-00"
    leftovers = client.command(
        f"SELECT count() FROM {config.database}.board_entries WHERE snapshot_id != {{id:String}}",
        parameters={"id": published.snapshot_id},
    )
    assert leftovers == 0, "the failed snapshot's entries were left behind"

    # A ranking failure (here: the aggregates are missing) changes nothing either.
    with aggregates_missing(client, config):
        with pytest.raises(PublishError):
            publish(client, config, AS_OF)
    assert api.get("/v1/charts/SE").get_json()["snapshot_id"] == published.snapshot_id

    # The next good publication is served at once.
    fresh = publish(client, config, AS_OF + timedelta(minutes=10))
    body = api.get("/v1/charts/SE").get_json()
    assert body["snapshot_id"] == fresh.snapshot_id
    assert body["items"][0] == {
        "rank": 1,
        "song_id": "song-new",
        "listens": 100,
        "move": "new",
        "peak_rank": 1,
        "streak": 1,
    }


def test_scheduler_job_survives_a_failure_and_reports_it(app, client, config, published):
    state = app.extensions["toplist"]
    with aggregates_missing(client, config):
        assert publish_job(config, "charts", state.on_publication) is None
    assert state.metrics.publications("charts", "failure") == 1
    api = app.test_client()
    assert api.get("/v1/charts/SE").get_json()["snapshot_id"] == published.snapshot_id
    served = api.get("/healthz").get_json()["boards"]["charts"]
    assert served["snapshot_id"] == published.snapshot_id, "the previous snapshot is served"
    error = served["last_publish_error"]
    assert "charts: ranking failed, nothing was published" in error and "listens_by_10m" in error
    snapshot = publish_job(config, "charts", state.on_publication)
    assert snapshot is not None
    assert api.get("/v1/charts/SE").get_json()["snapshot_id"] == snapshot.snapshot_id
    assert "last_publish_error" not in api.get("/healthz").get_json()["boards"]["charts"], (
        "the error of a failed publication stays after the board published again"
    )


def test_stale_snapshot_is_flagged(client, config, published):
    app = create_app(replace(config, stale_after_seconds=0.000001))
    body = app.test_client().get("/v1/charts/SE").get_json()
    assert body["stale"] is True, "an old snapshot must say so"
    app.extensions["toplist"].close()


def test_healthz_and_metrics(api, published):
    health = api.get("/healthz").get_json()
    assert health["status"] == "ok"
    assert health["boards"]["charts"]["snapshot_id"] == published.snapshot_id
    assert health["boards"]["charts"]["age_seconds"] >= 0
    assert set(health["boards"]) == {"charts", "listeners", "sale", "popular"}
    api.get("/v1/charts/SE")
    text = api.get("/metrics").get_data(as_text=True)
    for name in (
        'toplist_ingest_messages_total{board="charts",outcome="accepted",source="load"} 120',
        "toplist_ingest_rate_per_second",
        'toplist_dead_letters{board="charts"} 0',
        'toplist_dead_letters{board="sale"} 0',
        "toplist_snapshot_age_seconds",
        "toplist_snapshot_duration_seconds",
        'toplist_http_request_duration_seconds_count{endpoint="/v1/charts/<scope>"} 1',
    ):
        assert name in text, f"/metrics lacks {name}"


def test_web_page_and_scopes(api, published):
    page = api.get("/")
    assert page.status_code == 200 and b"Top songs" in page.data
    assert b"http://" not in page.data and b"https://" not in page.data, "no external assets"
    assert api.get("/v1/scopes").get_json()["scopes"] == ["global", "SE"]


def test_corrections_endpoint_voids_and_publishes_a_corrected_board(client, config, published):
    app = create_app(replace(config, internal_token="s3cret"))
    api = app.test_client()
    # The publisher, apart from the API: it answers requests for a publication.
    publisher = start_scheduler(config, app.extensions["toplist"].on_publication, boards=())
    try:
        body = {"event_ids": [f"SE-song-00-{i}" for i in range(10)], "reason": "fraud"}
        assert api.post("/internal/corrections", json=body).status_code == 401
        headers = {"Authorization": "Bearer s3cret"}
        answer = api.post("/internal/corrections", json={**body, "publish": True}, headers=headers)
        assert answer.status_code == 200, answer.get_data(as_text=True)
        result = answer.get_json()
        assert (result["voided"], result["not_found"]) == (10, 0)
        assert result["snapshot"]["snapshot_id"] != published.snapshot_id
        # Published at now, so the 24h window no longer holds the AS_OF listens; `all` does.
        items = api.get("/v1/charts/SE?window=all&k=3").get_json()["items"]
        # against the publication at AS_OF: song-01 one place up, song-00 from 1 to 10
        moved = {"streak": 2, "peak_rank": 1}
        assert items[0] == {"rank": 1, "song_id": "song-01", "listens": 14, "move": 1, **moved}
        fallen = {"rank": 10, "song_id": "song-00", "listens": 5, "move": -9, **moved}
        assert fallen in api.get("/v1/charts/SE?window=all&k=15").get_json()["items"], (
            "the voided listens still count"
        )
        again = api.post("/internal/corrections", json=body, headers=headers).get_json()
        assert (again["voided"], again["already_voided"]) == (0, 10), "voiding twice changed it"
        repeated = {**body, "event_ids": body["event_ids"] + body["event_ids"][:3]}
        counted = api.post("/internal/corrections", json=repeated, headers=headers).get_json()
        assert (counted["requested"], counted["not_found"]) == (10, 0), "a repeat counted twice"
        bad = api.post("/internal/corrections", json={"event_ids": "x"}, headers=headers)
        assert bad.status_code == 400 and error_of(bad)["code"] == "invalid_event_ids"
    finally:
        stop_scheduler(publisher)
        app.extensions["toplist"].close()


def test_corrections_with_a_body_nested_too_deep_is_a_400(config):
    app = create_app(replace(config, internal_token="s3cret"))
    try:
        deep = '{"event_ids": ' + "[" * 100_000 + "]" * 100_000 + ', "reason": "x"}'
        answer = app.test_client().post(
            "/internal/corrections",
            data=deep,
            content_type="application/json",
            headers={"Authorization": "Bearer s3cret"},
        )
        assert answer.status_code == 400, answer.data[:300]
        assert answer.get_json()["error"]["code"] == "invalid_body"
    finally:
        app.extensions["toplist"].close()


def test_metrics_sum_every_worker_process_in_multiprocess_mode(tmp_path):
    """Served by several worker processes (PROMETHEUS_MULTIPROC_DIR shared by them), a scrape
    of any one reports the requests and publications of all of them."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}

    def worker(requests: int) -> str:
        code = (
            "from api.metrics import Metrics; metrics = Metrics()\n"
            f"for _ in range({requests}):\n"
            "    metrics.observe_request('/v1/charts/<scope>', 200, 0.01)\n"
            "metrics.record_publication('charts', True)\n"
            "print(metrics.render([]))"
        )
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=60, check=True)  # fmt: skip
        return run.stdout

    worker(2)
    scraped = worker(3)
    for line in (
        'toplist_http_requests_total{endpoint="/v1/charts/<scope>",status="200"} 5.0',
        'toplist_http_request_duration_seconds_count{endpoint="/v1/charts/<scope>"} 5.0',
        'toplist_publications_total{board="charts",outcome="success"} 2.0',
    ):
        assert line in scraped, f"{line} not in:\n{scraped}"
