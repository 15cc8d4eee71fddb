"""openapi.yaml is true: real responses match it, schemathesis finds no 500s, caching works."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import requests
import schemathesis
from live_api import ARTIFACTS, BUYER, TOKEN, TOP_SONGS

SPEC = Path(__file__).resolve().parent.parent / "api" / "openapi.yaml"
spec = schemathesis.openapi.from_path(SPEC)
FUZZ_EXAMPLES = 30  # per operation and phase (the run is also killed after 5 minutes)


def call(url: str, method: str = "GET", headers=None, body: object | None = None):
    return requests.request(method, url, headers=headers, json=body, timeout=30)


# (path template, method, concrete path, body, with the token, expected status)
EXAMPLES = [
    ("/v1/charts/{scope}", "GET", "/v1/charts/SE?window=1h&k=2", None, False, 200),
    ("/v1/charts/{scope}", "GET", "/v1/charts/global", None, False, 200),
    ("/v1/charts/{scope}", "GET", "/v1/charts/FI?window=all", None, False, 200),
    ("/v1/charts/{scope}", "GET", "/v1/charts/SE?k=0", None, False, 400),
    ("/v1/charts/{scope}", "GET", "/v1/charts/se", None, False, 400),
    (
        "/v1/charts/{scope}/songs/{song_id}",
        "GET",
        "/v1/charts/SE/songs/se-also-ran",
        None,
        False,
        200,
    ),
    ("/v1/charts/{scope}/songs/{song_id}", "GET", "/v1/charts/SE/songs/nope", None, False, 404),
    (
        "/v1/charts/{scope}/songs/{song_id}/around",
        "GET",
        "/v1/charts/SE/songs/se-also-ran/around?n=1",
        None,
        False,
        200,
    ),
    (
        "/v1/charts/{scope}/songs/{song_id}/around",
        "GET",
        "/v1/charts/SE/songs/a/around?n=0",
        None,
        False,
        400,
    ),
    (
        "/v1/charts/{scope}/songs/{song_id}/around",
        "GET",
        "/v1/charts/SE/songs/nope/around",
        None,
        False,
        404,
    ),
    (
        "/v1/charts/{scope}/songs/{song_id}/series",
        "GET",
        "/v1/charts/SE/songs/se-also-ran/series?window=24h",
        None,
        False,
        200,
    ),
    (
        "/v1/charts/{scope}/songs/{song_id}/series",
        "GET",
        "/v1/charts/SE/songs/nope/series",
        None,
        False,
        404,
    ),
    (
        "/v1/sale/products/{product_id}/around",
        "GET",
        "/v1/sale/products/product-000/around",
        None,
        False,
        200,
    ),
    (
        "/v1/sale/buyers/{buyer_id}/around",
        "GET",
        f"/v1/sale/buyers/{BUYER}/around?n=2",
        None,
        False,
        200,
    ),
    ("/v1/sale/buyers/{buyer_id}/around", "GET", "/v1/sale/buyers/nope/around", None, False, 404),
    ("/v1/scopes", "GET", "/v1/scopes", None, False, 200),
    ("/v1/listeners", "GET", "/v1/listeners?k=3", None, False, 200),
    ("/v1/listeners", "GET", "/v1/listeners?k=1001", None, False, 400),
    ("/v1/sale/products", "GET", "/v1/sale/products", None, False, 200),
    ("/v1/sale/buyers", "GET", "/v1/sale/buyers?k=5", None, False, 200),
    ("/v1/sale/buyers", "GET", "/v1/sale/buyers?k=x", None, False, 400),
    ("/v1/sale/products/{product_id}", "GET", "/v1/sale/products/product-000", None, False, 200),
    ("/v1/sale/products/{product_id}", "GET", "/v1/sale/products/nope", None, False, 404),
    ("/v1/sale/buyers/{buyer_id}", "GET", f"/v1/sale/buyers/{BUYER}", None, False, 200),
    ("/v1/topk", "GET", "/v1/topk?scope=city:sf&metric=views&window=1h&k=5", None, False, 200),
    ("/v1/topk", "GET", "/v1/topk", None, False, 200),
    ("/v1/topk", "GET", "/v1/topk?scope=town:x", None, False, 400),
    (
        "/v1/restaurants/{restaurant_id}/popular-items",
        "GET",
        "/v1/restaurants/r01/popular-items?k=3&metric=views&window=7d",
        None,
        False,
        200,
    ),
    (
        "/v1/restaurants/{restaurant_id}/popular-items",
        "GET",
        "/v1/restaurants/r01/popular-items?k=21",
        None,
        False,
        400,
    ),
    ("/internal/rebuild", "POST", "/internal/rebuild", {"board": "popular"}, False, 401),
    ("/internal/rebuild", "POST", "/internal/rebuild", {"board": "charts"}, True, 400),
    (
        "/internal/rebuild",
        "POST",
        "/internal/rebuild",
        {"board": "popular", "scoring_version": "v2", "scope": "all"},
        True,
        202,
    ),
    ("/internal/jobs/{job_id}", "GET", "/internal/jobs/no-such-job", None, True, 404),
    ("/internal/jobs/{job_id}", "GET", "/internal/jobs/no-such-job", None, False, 401),
    ("/healthz", "GET", "/healthz", None, False, 200),
    ("/metrics", "GET", "/metrics", None, False, 200),
    ("/openapi.yaml", "GET", "/openapi.yaml", None, False, 200),
    ("/", "GET", "/", None, False, 200),
    (
        "/internal/corrections",
        "POST",
        "/internal/corrections",
        {"event_ids": ["x"], "reason": "fraud"},
        False,
        401,
    ),
    (
        "/internal/corrections",
        "POST",
        "/internal/corrections",
        {"event_ids": [], "reason": "fraud"},
        True,
        400,
    ),
    (
        "/internal/corrections",
        "POST",
        "/internal/corrections",
        {"event_ids": ["never-sent"], "reason": "test traffic"},
        True,
        200,
    ),
    (
        "/internal/corrections",
        "POST",
        "/internal/corrections",
        {"event_ids": ["never-ordered"], "reason": "refund", "board": "sale"},
        True,
        200,
    ),
    (
        "/internal/corrections",
        "POST",
        "/internal/corrections",
        {"event_ids": ["x"], "reason": "fraud", "board": "listeners"},
        True,
        400,
    ),
]


def test_every_endpoint_answers_as_openapi_yaml_says(served):
    described = {
        (path, method.upper()) for path, item in spec.raw_schema["paths"].items() for method in item
    }
    assert described == {(path, method) for path, method, *_ in EXAMPLES}, (
        "every documented endpoint needs an example here, and every example a description"
    )
    for template, method, path, body, with_token, status in EXAMPLES:
        headers = served.auth if with_token else {}
        response = call(served.url + path, method, headers, body)
        assert response.status_code == status, f"{method} {path}: {response.text[:300]}"
        spec[template][method].validate_response(response)
    assert call(served.url + "/openapi.yaml").content == SPEC.read_bytes()


def test_internal_endpoint_needs_the_token(served):
    body = {"event_ids": ["se-hour-hit-0"], "reason": "fraud"}
    url = served.url + "/internal/corrections"
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        response = call(url, "POST", headers, body)
        assert response.status_code == 401, f"{headers}: answered without the token"
        assert response.json()["error"]["code"] == "unauthorized"
        assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_a_conditional_request_with_the_etag_gets_304_until_the_next_snapshot(served):
    url = served.url + "/v1/charts/SE?window=24h"
    first = call(url)
    assert first.status_code == 200
    etag = first.headers["ETag"]
    assert etag == f'"{served.snapshot.snapshot_id}"'
    cache = first.headers["Cache-Control"]
    assert "public" in cache and "max-age=" in cache
    max_age = int(cache.split("max-age=")[1].split(",")[0])
    assert 0 < max_age <= served.config.publish_interval_seconds, (
        "a cache must keep the answer until the next publication is due, and no longer"
    )
    again = call(url, headers={"If-None-Match": etag})
    assert (again.status_code, again.content) == (304, b""), "an unchanged board was resent"
    assert again.headers["ETag"] == etag
    weak = call(url, headers={"If-None-Match": f"W/{etag}"})  # as a proxy may pass it on
    assert weak.status_code == 304, "a GET compares entity tags weakly (RFC 9110 13.1.2)"

    snapshot = served.republish()  # a new publication: the old ETag no longer matches
    fresh = call(url, headers={"If-None-Match": etag})
    assert fresh.status_code == 200 and fresh.headers["ETag"] == f'"{snapshot.snapshot_id}"'
    assert fresh.json()["items"][0]["song_id"] == TOP_SONGS[("SE", "24h")]
    error = call(served.url + "/v1/charts/SE?k=0")
    assert "no-store" in error.headers["Cache-Control"], "an error must never be cached"


def test_schemathesis_finds_no_server_errors_and_nothing_outside_the_spec(served, tmp_path):
    """Schemathesis' own runner against the live server: every check, bounded examples."""
    command = [
        str(Path(sys.executable).with_name("st")),
        "run",
        served.url + "/openapi.yaml",
        "--checks=all",
        f"--header=Authorization: Bearer {TOKEN}",
        f"--max-examples={FUZZ_EXAMPLES}",
        "--seed=20261203",
        "--workers=1",
        "--generation-database=none",
        "--no-color",
    ]
    run = subprocess.run(
        command, capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False
    )
    output = run.stdout + run.stderr
    (ARTIFACTS / "schemathesis.txt").write_text(output)
    assert run.returncode == 0, f"schemathesis found problems:\n{output[-6000:]}"
    assert "No issues found" in output or "passed" in output.lower(), output[-2000:]
