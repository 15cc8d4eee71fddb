"""Every field of every answer means what api/openapi.yaml says it means.

The schema tests (test_openapi.py) hold each field to its type; these hold it to its
description, against what was loaded (tests/live_api.py) and the plain-Python references
(tests/reference.py, tests/boards_reference.py). `HELD` names the test that holds each field
of the description; a field with no description, or with no test holding it, fails
`test_every_field_is_described_and_held`, so a new field cannot go unexamined.
"""

from __future__ import annotations

import importlib
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests
import yaml
from boards_reference import (
    current_listeners,
    distinct_buyers,
    listeners_board,
    sale_boards,
    shelves,
)
from live_api import AS_OF, TOKEN, board_listen_events, other_boards
from reference import boards

from toplist.snapshots import iso

SPEC = yaml.safe_load((Path(__file__).resolve().parent.parent / "api" / "openapi.yaml").read_text())
WINDOWS = ("1h", "24h", "7d", "30d", "all")


def fields_named(schema: str, *names: str) -> list[str]:
    """`schema.name` for each space-separated name."""
    return [f"{schema}.{name}" for group in names for name in group.split()]


# field (as `fields_of_the_answers` names it) -> "module::test" that holds it to its description
RESTART = "test_kafka_broker::test_a_broker_restart_mid_stream_loses_nothing_and_ingestion_resumes"
HELD: dict[str, str] = {
    # Held where a consumer, a failing publication or an old snapshot can be staged.
    "Health.status": RESTART,
    "Health.kafka": RESTART,
    **{
        f"Health.kafka.*.{name}": RESTART
        for name in ("running", "topic", "messages", "reachable", "lag", "last_error")
    },
    "Health.boards.*.last_publish_error": "test_api::"
    "test_scheduler_job_survives_a_failure_and_reports_it",
    "VoidResult.publish_error": "test_registry::"
    "test_a_correction_asks_the_publisher_and_says_when_none_answers",
    # Held across publications (tests/test_movement.py), against tests/reference.py movement.
    **{
        f"{item}.{name}": "test_movement::"
        "test_moves_peaks_and_streaks_across_publications_with_a_correction_between"
        for item in ("ChartItem", "SongRank")
        for name in ("move", "peak_rank", "streak")
    },
    **{
        f"{item}.{name}": "test_movement::test_every_board_says_how_its_entries_moved"
        for item in ("Listeners.items", "SaleEntry", "Shelf.items")
        for name in ("move", "peak_rank", "streak")
    },
    # A restaurant's shelf: held against tests/boards_reference.py in tests/test_shelf.py.
    **{
        f"RestaurantShelf.{name}": "test_shelf::"
        "test_a_restaurants_shelf_widens_while_it_has_too_few_orders"
        for name in (
            "restaurant_id",
            "window",
            "window_used",
            "metric",
            "k",
            "items",
            *(f"items.{f}" for f in ("rank", "item_id", "score", "name", "price_cents")),
            *(f"items.{f}" for f in ("photo_url", "available")),
        )
    },
    **{
        f"RestaurantShelf.{name}": "test_shelf::"
        "test_an_old_or_unreadable_snapshot_gives_each_restaurant_its_fallback_shelf"
        for name in ("as_of", "snapshot_id", "source")
    },
    # Versioned scoring and the rebuild job: tests/test_scoring.py, against the references.
    **{
        name: "test_scoring::test_a_scoring_version_is_backfilled_by_a_rebuild_job_and_then_served"
        for name in fields_named(
            "Job",
            "created_at done error job_id kind request result state total updated_at",
            "request.board request.from request.scope request.scoring_version request.to",
            "result.entries result.snapshots result.overlap",
            "result.overlap.against result.overlap.by_list result.overlap.lists",
            "result.overlap.lowest result.overlap.mean result.overlap.snapshot_id",
            "result.overlap.top result.overlap.lowest.metric result.overlap.lowest.overlap",
            "result.overlap.lowest.scope result.overlap.lowest.window",
        )
        + fields_named(
            "RebuildAccepted",
            "job_id request state request.board request.from request.scope",
            "request.scoring_version request.to",
        )
        + ["RestaurantShelf.scoring_version", "Shelf.scoring_version", "Snapshot.scorings"]
    },
    "Error.error": "test_openapi::test_internal_endpoint_needs_the_token",
    "Error.error.code": "test_openapi::test_internal_endpoint_needs_the_token",
}


def holds(*names: str) -> Callable:
    def mark(test: Callable) -> Callable:
        for name in names:
            HELD[name] = f"{__name__}::{test.__name__}"
        return test

    return mark


def fields_of(name: str, schema: dict, out: dict[str, dict]) -> None:
    """Every property under `schema` as `name.field` (allOf merged, `*` for a map's values,
    a list's items under the list's name), with its schema."""
    if "$ref" in schema:
        ref = schema["$ref"].split("/")[-1]
        if ref == "SnapshotFields":  # held once, on every answer that has them
            name = "SnapshotFields"
        schema = SPEC["components"]["schemas"][ref]
    for part in schema.get("allOf", ()):
        fields_of(name, part, out)
    for field, sub in schema.get("properties", {}).items():
        out[f"{name}.{field}"] = sub
        fields_of(f"{name}.{field}", sub, out)
    if isinstance(schema.get("additionalProperties"), dict):
        fields_of(f"{name}.*", schema["additionalProperties"], out)
    if "items" in schema:
        fields_of(name, schema["items"], out)


def fields_of_the_answers() -> dict[str, dict]:
    """The fields of every JSON answer the description gives (requests are not answers)."""
    out: dict[str, dict] = {}
    for name in SPEC["components"]["schemas"]:
        if name not in (
            "VoidRequest",
            "RebuildRequest",
            "SnapshotFields",
            "SaleEntry",
            "ChartItem",
            "Snapshot",
        ):
            fields_of(name, {"$ref": f"#/components/schemas/{name}"}, out)
    return {
        # A list's items are named by the schema they are (SaleEntry, ChartItem, Snapshot).
        name.replace("SaleBoard.items.", "SaleEntry.")
        .replace("SaleRank.", "SaleEntry.")
        .replace("Chart.items.", "ChartItem.")
        .replace("SongAround.items.", "ChartItem.")
        .replace("SaleAround.items.", "SaleEntry.")
        .replace("VoidResult.snapshot.", "Snapshot."): sub
        for name, sub in out.items()
    }


def test_every_field_is_described_and_held():
    described = fields_of_the_answers()
    missing = sorted(name for name, sub in described.items() if not sub.get("description"))
    assert not missing, f"fields api/openapi.yaml does not describe: {missing}"
    assert sorted(set(described) - set(HELD)) == [], "fields no test holds to their description"
    assert sorted(set(HELD) - set(described)) == [], "held fields the description no longer has"
    for name, where in HELD.items():
        module, test = where.split("::")
        assert callable(getattr(importlib.import_module(module), test, None)), (name, where)


# -- what was loaded, and what each board must show -----------------------------------------


MOVEMENT = ("move", "peak_rank", "streak")  # held in tests/test_movement.py


def plain(items: list[dict]) -> list[dict]:
    """The rows without their movement fields, to hold to the references' rankings."""
    return [{k: v for k, v in item.items() if k not in MOVEMENT} for item in items]


def get(served, path: str) -> dict:
    response = requests.get(served.url + path, timeout=30)
    assert response.status_code == 200, f"{path}: {response.text[:300]}"
    return response.json()


def charted() -> dict[tuple[str, str], list[tuple[str, int]]]:
    return boards(board_listen_events(), AS_OF)


def scopes_with_listens() -> list[str]:
    return ["global", *sorted({scope for _, scope in charted()} - {"global"})]


ENDPOINTS = {  # an answer of each kind, and its board
    "/v1/charts/SE?window=24h&k=2": "charts",
    "/v1/charts/SE/songs/se-hour-hit?window=1h": "charts",
    "/v1/scopes": "charts",
    "/v1/listeners?k=3": "listeners",
    "/v1/sale/products?k=3": "sale",
    "/v1/sale/buyers?k=3": "sale",
    "/v1/sale/products/product-000": "sale",
    "/v1/topk?scope=global&metric=views&window=1h&k=3": "popular",
}
STEPS = {"charts": 600, "popular": 60, "listeners": 1, "sale": 1}


@holds(
    "SnapshotFields.as_of",
    "SnapshotFields.snapshot_id",
    "SnapshotFields.policy",
    "SnapshotFields.published_at",
    "SnapshotFields.stale",
    "Health.boards",
    "Health.boards.*.snapshot_id",
    "Health.boards.*.as_of",
    "Health.boards.*.published_at",
    "Health.boards.*.age_seconds",
    "Health.boards.*.stale",
)
def test_every_answer_says_which_snapshot_it_was_read_from(served):
    health = get(served, "/healthz")
    assert set(health["boards"]) == {"charts", "listeners", "sale", "popular"}
    for path, board in ENDPOINTS.items():
        response = requests.get(served.url + path, timeout=30)
        body, current = response.json(), health["boards"][board]
        assert body["snapshot_id"] == current["snapshot_id"], path
        if "ETag" in response.headers:  # the shelves are never cached
            assert response.headers["ETag"] == f'"{body["snapshot_id"]}"', path
        assert body["as_of"] == current["as_of"] == iso(AS_OF), f"{path}: the cut published"
        as_of = datetime.fromisoformat(body["as_of"].replace("Z", "+00:00"))
        assert as_of.timestamp() % STEPS[board] == 0, f"{path}: as_of not on the board's step"
        assert body["published_at"] == current["published_at"], path
        published = datetime.fromisoformat(body["published_at"].replace("Z", "+00:00"))
        age = (datetime.now(UTC) - published).total_seconds()
        assert 0 <= age < 600 and abs(current["age_seconds"] - age) < 30, path
        limit = served.config.stale_after(board)
        assert body["stale"] is current["stale"] is (age > limit) is False, path
        assert body["policy"] == served.config.policy, path
    ties = get(served, "/v1/charts/SE?policy=v1-ties")
    assert ties["policy"] == "v1-ties", "policy names the policy the answer was ranked with"


@holds(
    "Chart.scope",
    "Chart.window",
    "Chart.k",
    "Chart.items",
    "ChartItem.rank",
    "ChartItem.song_id",
    "ChartItem.listens",
)
def test_a_chart_is_the_top_k_of_its_scope_and_window(served):
    truth = charted()
    for scope in scopes_with_listens() + ["FI"]:
        for window in WINDOWS:
            ranked = truth.get((window, scope), [])
            for k in (1, 2, 10):
                body = get(served, f"/v1/charts/{scope}?window={window}&k={k}")
                assert (body["scope"], body["window"], body["k"]) == (scope, window, k)
                expected = [
                    {"rank": n, "song_id": song, "listens": listens}
                    for n, (song, listens) in enumerate(ranked[:k], start=1)
                ]
                assert plain(body["items"]) == expected, (scope, window, k)
    default = get(served, "/v1/charts/global")
    assert (default["window"], default["k"]) == ("24h", served.config.default_k)


@holds(
    "SongRank.scope",
    "SongRank.window",
    "SongRank.song_id",
    "SongRank.rank",
    "SongRank.listens",
)
def test_a_song_rank_is_its_place_in_the_whole_scope(served):
    for (window, scope), ranked in charted().items():
        for place, (song, listens) in enumerate(ranked, start=1):
            body = get(
                served, f"/v1/charts/{scope}/songs/{requests.utils.quote(song)}?window={window}"
            )
            assert (body["scope"], body["window"], body["song_id"]) == (scope, window, song)
            assert (body["rank"], body["listens"]) == (place, listens), (scope, window, song)


@holds(
    "SongSeries.scope",
    "SongSeries.window",
    "SongSeries.song_id",
    "SongSeries.listens",
    "SongSeries.step_seconds",
    "SongSeries.points",
    "SongSeries.points.start",
    "SongSeries.points.listens",
)
def test_a_song_series_is_its_listens_per_step_over_its_window(served):
    unique: dict = {}
    for listen in board_listen_events():
        unique.setdefault(listen.event_id, listen)  # the first copy of an event_id counts
    steps = {"1h": 600, "24h": 3600, "7d": 3600, "30d": 3600, "all": 86400}
    lengths = {"1h": 1, "24h": 24, "7d": 168, "30d": 720}
    for (window, scope), ranked in charted().items():
        for song, listens in {*ranked[:2], ranked[-1]}:
            path = f"/v1/charts/{scope}/songs/{requests.utils.quote(song)}/series?window={window}"
            body = get(served, path)
            step = timedelta(seconds=steps[window])
            assert (body["scope"], body["window"], body["song_id"]) == (scope, window, song)
            assert (body["listens"], body["step_seconds"]) == (listens, steps[window])
            mine = [
                x.event_time
                for x in unique.values()
                if x.song_id == song and scope in ("global", x.country) and x.event_time < AS_OF
            ]
            points = body["points"]
            first = AS_OF - step * len(points)
            if window == "all":  # back to the day of its first listen
                assert first <= min(mine) < first + step
            else:
                assert len(points) == lengths[window] * (6 if window == "1h" else 1)
            starts = [first + step * n for n in range(len(points))]
            assert [point["start"] for point in points] == [iso(start) for start in starts]
            expected = [sum(1 for t in mine if start <= t < start + step) for start in starts]
            assert [point["listens"] for point in points] == expected, (window, scope, song)
            assert sum(expected) == listens
    missing = requests.get(served.url + "/v1/charts/SE/songs/nobody/series", timeout=30)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "song_not_ranked"


@holds(
    "SongAround.scope",
    "SongAround.window",
    "SongAround.n",
    "SongAround.song_id",
    "SongAround.rank",
    "SongAround.items",
)
def test_around_me_is_the_song_and_its_neighbours_on_its_chart(served):
    for (window, scope), ranked in charted().items():
        rows = [
            {"rank": place, "song_id": song, "listens": listens}
            for place, (song, listens) in enumerate(ranked, start=1)
        ]
        for at, row in enumerate(rows):  # the top and the bottom of every board included
            song = requests.utils.quote(row["song_id"])
            for n in (1, 2):
                body = get(served, f"/v1/charts/{scope}/songs/{song}/around?window={window}&n={n}")
                assert (body["scope"], body["window"], body["n"]) == (scope, window, n)
                assert (body["song_id"], body["rank"]) == (row["song_id"], row["rank"])
                assert plain(body["items"]) == rows[max(0, at - n) : at + n + 1], (
                    scope,
                    window,
                    at,
                )
    assert get(served, "/v1/charts/SE/songs/se-day-anthem/around")["n"] == 5
    unranked = requests.get(served.url + "/v1/charts/SE/songs/nobody/around", timeout=30)
    assert unranked.status_code == 404
    assert unranked.json()["error"]["code"] == "song_not_ranked"
    for bad in ("0", "101", "x", "-1", "1.5"):
        answer = requests.get(
            served.url + f"/v1/charts/SE/songs/se-day-anthem/around?n={bad}", timeout=30
        )
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_n", bad


@holds(
    "SaleAround.board",
    "SaleAround.metric",
    "SaleAround.n",
    "SaleAround.product_id",
    "SaleAround.buyer_id",
    "SaleAround.rank",
    "SaleAround.items",
)
def test_around_me_on_the_sale_boards(served):
    boards = {
        "products": get(served, "/v1/sale/products?k=1000")["items"],
        "buyers": get(served, "/v1/sale/buyers?k=1000")["items"],
    }
    for board, metric in (("products", "units"), ("buyers", "spend_cents")):
        rows, id_field = boards[board], f"{board[:-1]}_id"
        assert len(rows) > 6
        for at in (0, 1, len(rows) // 2, len(rows) - 1):
            item = rows[at][id_field]
            body = get(served, f"/v1/sale/{board}/{requests.utils.quote(item)}/around?n=3")
            assert (body["board"], body["metric"], body["n"]) == (board, metric, 3)
            assert (body[id_field], body["rank"]) == (item, rows[at]["rank"])
            assert body["items"] == rows[max(0, at - 3) : at + 4], (board, at)
        missing = requests.get(served.url + f"/v1/sale/{board}/nobody/around", timeout=30)
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == f"{board[:-1]}_not_ranked"


def pages(served, path: str, k: int, rows: str = "items") -> list[dict]:
    """Every page of `path` at k rows a page, from offset 0 until one comes back empty."""
    found, offset = [], 0
    while True:
        body = get(served, f"{path}{'&' if '?' in path else '?'}k={k}&offset={offset}")
        assert body["k"] == k, path
        if not body[rows]:
            return found
        found += plain(body[rows])
        offset += k


def test_pages_hold_every_row_once_in_rank_order(served):
    for (window, scope), ranked in charted().items():
        expected = [
            {"rank": n, "song_id": song, "listens": listens}
            for n, (song, listens) in enumerate(ranked, start=1)
        ]
        for k in (1, 2):
            assert pages(served, f"/v1/charts/{scope}?window={window}", k) == expected
    ties = "/v1/charts/global?window=all&policy=v1-ties"
    assert pages(served, ties, 1) == plain(get(served, ties + "&k=1000")["items"])
    for path in ("/v1/listeners?", "/v1/sale/products?", "/v1/sale/buyers?"):
        assert pages(served, path, 3) == plain(get(served, path + "k=1000")["items"]), path
    for scope, metric, window in (("global", "views", "1d"), ("city:sf", "orders", "1d")):
        shelf = f"/v1/topk?scope={scope}&metric={metric}&window={window}"
        whole = get(served, shelf + "&k=100")
        assert pages(served, shelf, 2) == plain(whole["items"]) and len(whole["items"]) > 4
        count = len(whole["items"])
        last = get(served, shelf + f"&k=2&offset={count - 2}")
        full = get(served, shelf + f"&k={count}")  # the same last item, from the top
        assert last["hidden"] == full["hidden"], "hidden counts from the top of the shelf"
    for bad in ("-1", "x", "1.5", "1001"):
        answer = requests.get(served.url + f"/v1/charts/SE?offset={bad}", timeout=30)
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_offset"
    beyond = requests.get(served.url + "/v1/topk?offset=301", timeout=30)
    assert beyond.status_code == 400 and beyond.json()["error"]["code"] == "invalid_offset"


@holds("Scopes.scopes", "Scopes.policies")
def test_scopes_are_global_then_every_country_with_listens(served):
    body = get(served, "/v1/scopes")
    assert body["scopes"] == scopes_with_listens()
    assert body["policies"] == list(served.config.policies)
    for policy in body["policies"]:
        assert get(served, f"/v1/charts/global?policy={policy}")["policy"] == policy


@holds(
    "Listeners.k",
    "Listeners.users",
    "Listeners.items",
    "Listeners.items.rank",
    "Listeners.items.song_id",
    "Listeners.items.listeners",
)
def test_live_listeners_are_the_users_whose_playback_is_each_song(served):
    _, events = other_boards()
    config = served.config
    now = current_listeners(
        events["listeners"].events,
        AS_OF,
        config.listeners_expiry_seconds,
        config.listeners_retention_hours,
    )
    ranked = listeners_board(now)
    for k in (1, 3, 1000):
        body = get(served, f"/v1/listeners?k={k}")
        assert body["k"] == k
        assert body["users"] == len(now) == sum(Counter(now.values()).values())
        expected = [
            {"rank": n, "song_id": song, "listeners": count}
            for n, (song, count) in enumerate(ranked[:k], start=1)
        ]
        assert plain(body["items"]) == expected, k
    everyone = get(served, "/v1/listeners?k=1000")
    assert body["users"] == sum(item["listeners"] for item in everyone["items"])


@holds(
    "SaleBoard.board",
    "SaleBoard.metric",
    "SaleBoard.k",
    "SaleBoard.items",
    "SaleBoard.totals",
    "SaleBoard.totals.orders",
    "SaleBoard.totals.units",
    "SaleBoard.totals.spend_cents",
    "SaleBoard.totals.products",
    "SaleBoard.totals.distinct_buyers",
    "SaleBoard.totals.distinct_buyers_error",
    "SaleEntry.rank",
    "SaleEntry.product_id",
    "SaleEntry.buyer_id",
    "SaleEntry.units",
    "SaleEntry.spend_cents",
    "SaleEntry.orders",
    "SaleEntry.distinct_buyers",
)
def test_the_sale_boards_hold_exact_sums_of_each_order_once(served):
    _, events = other_boards()
    orders = list({order["event_id"]: order for order in events["sale"].events}.values())
    truth = sale_boards(orders)
    per_product, total_buyers = distinct_buyers(orders)
    count = Counter(order["product_id"] for order in orders)
    by_buyer = Counter(order["buyer_id"] for order in orders)
    units = Counter()
    for order in orders:
        units[order["buyer_id"]] += order["units"]
    expected = {
        "products": [
            {
                "product_id": product,
                "units": sold,
                "orders": count[product],
                "distinct_buyers": per_product[product],
            }
            for product, sold in truth["products"]
        ],  # fmt: skip
        "buyers": [
            {
                "buyer_id": buyer,
                "spend_cents": spend,
                "orders": by_buyer[buyer],
                "units": units[buyer],
            }
            for buyer, spend in truth["buyers"]
        ],  # fmt: skip
    }
    for board, metric in (("products", "units"), ("buyers", "spend_cents")):
        body = get(served, f"/v1/sale/{board}?k=5")
        assert (body["board"], body["metric"], body["k"]) == (board, metric, 5)
        rows = [{"rank": n, **row} for n, row in enumerate(expected[board][:5], start=1)]
        assert plain(body["items"]) == rows, board
        totals = body["totals"]
        assert totals["orders"] == len(orders)
        assert totals["units"] == sum(order["units"] for order in orders)
        assert totals["spend_cents"] == sum(order["amount_cents"] for order in orders)
        assert totals["products"] == len(per_product)
        assert totals["distinct_buyers"] == total_buyers, "the sale's distinct buyers are exact"
        assert totals["distinct_buyers_error"].startswith("exact")
        for n, row in enumerate(expected[board], start=1):  # each one's own answer
            one = get(served, f"/v1/sale/{board}/{row[f'{board[:-1]}_id']}")
            assert {k: v for k, v in one.items() if k in row or k == "rank"} == {"rank": n, **row}


@holds(
    "Shelf.scope",
    "Shelf.metric",
    "Shelf.window",
    "Shelf.k",
    "Shelf.hidden",
    "Shelf.items",
    "Shelf.items.rank",
    "Shelf.items.item_id",
    "Shelf.items.name",
    "Shelf.items.price_cents",
    "Shelf.items.views",
    "Shelf.items.orders",
)
def test_a_shelf_is_the_ranked_items_the_catalog_lets_it_show(served):
    catalog, events = other_boards()
    shown = {row["item_id"]: row for row in catalog if row["available"] and not row["deleted"]}
    truth = shelves(events["popular"].events, AS_OF)
    some = [scope for scope in {s for s, _, _ in truth} if scope != "global"]
    scopes = ["global", *sorted(some)[:3], "city:nowhere"]
    for scope in scopes:
        for metric in ("views", "orders"):
            for window in ("1m", "1h", "1d"):
                items, hidden = [], 0
                for item, score in truth.get((scope, metric, window), []):
                    if len(items) == 5:
                        break
                    if item not in shown:
                        hidden += 1
                        continue
                    row = shown[item]
                    items.append({"rank": len(items) + 1, "item_id": item, "name": row["name"],
                                  "price_cents": row["price_cents"], metric: score})  # fmt: skip
                query = f"scope={requests.utils.quote(scope)}&metric={metric}&window={window}&k=5"
                body = get(served, f"/v1/topk?{query}")
                assert (body["scope"], body["metric"], body["window"], body["k"]) == (
                    scope, metric, window, 5,
                )  # fmt: skip
                assert (plain(body["items"]), body["hidden"]) == (items, hidden), (
                    scope,
                    metric,
                    window,
                )


@holds(
    "Scopes.void_count",
    "Health.boards.*.void_count",
    "VoidResult.requested",
    "VoidResult.voided",
    "VoidResult.already_voided",
    "VoidResult.not_found",
    "VoidResult.snapshot",
    "Snapshot.board",
    "Snapshot.stats",
    "Snapshot.snapshot_id",
    "Snapshot.as_of",
    "Snapshot.policy",
    "Snapshot.policies",
    "Snapshot.void_count",
    "Snapshot.published_at",
    "Snapshot.entry_count",
    "Snapshot.keep_top",
    "Snapshot.duration_ms",
    "Error.error.message",
)
def test_a_correction_says_what_it_voided_and_which_snapshot_left_it_out(served):
    """Last in this module: the correction's publication moves the charts to the present."""
    assert get(served, "/v1/scopes")["void_count"] == 0
    url, auth = served.url + "/internal/corrections", {"Authorization": f"Bearer {TOKEN}"}
    ids = ["se-also-ran-0", "se-also-ran-0", "se-also-ran-1", "never-sent"]
    started = datetime.now(UTC)
    clock = time.monotonic()
    answer = requests.post(url, json={"event_ids": ids, "reason": "test traffic",
                                      "publish": True}, headers=auth, timeout=60)  # fmt: skip
    elapsed_ms = (time.monotonic() - clock) * 1000
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["requested"], body["voided"], body["already_voided"], body["not_found"]) == (
        3, 2, 0, 1,
    )  # fmt: skip
    snapshot, config = body["snapshot"], served.config
    chart = requests.get(served.url + "/v1/charts/SE?window=all&k=10", timeout=30)
    assert snapshot["board"] == "charts"
    assert chart.headers["ETag"] == f'"{snapshot["snapshot_id"]}"', "the snapshot served next"
    assert snapshot["as_of"] == chart.json()["as_of"]
    as_of = datetime.fromisoformat(snapshot["as_of"].replace("Z", "+00:00"))
    assert as_of <= started and started - as_of < timedelta(minutes=10), "now, on the bucket"
    assert (snapshot["policy"], snapshot["policies"]) == (config.policy, list(config.policies))
    published = datetime.fromisoformat(snapshot["published_at"].replace("Z", "+00:00"))
    assert started - timedelta(seconds=1) <= published <= datetime.now(UTC)
    assert 0 < snapshot["duration_ms"] <= elapsed_ms
    assert snapshot["keep_top"] == config.keep_top and snapshot["stats"] == {}
    counted = sum(
        len(get(served, f"/v1/charts/{scope}?window={window}&k=1000&policy={policy}")["items"])
        for scope in scopes_with_listens()
        for window in WINDOWS
        for policy in config.policies
    )
    assert snapshot["entry_count"] == counted, "entry_count is every row of every list"
    assert snapshot["void_count"] == 2 == get(served, "/v1/scopes")["void_count"]
    assert get(served, "/healthz")["boards"]["charts"]["void_count"] == 2
    also_ran = {i["song_id"]: i["listens"] for i in chart.json()["items"]}["se-also-ran"]
    assert also_ran == 5 - 2, "the voided listens still count"

    again = requests.post(url, json={"event_ids": ids, "reason": "again"}, headers=auth,
                          timeout=60).json()  # fmt: skip
    assert (again["requested"], again["voided"], again["already_voided"], again["not_found"]) == (
        3, 0, 2, 1,
    )  # fmt: skip
    assert again["snapshot"] is None, "no publication was asked for"

    refused = requests.post(url, json={"event_ids": [], "reason": "x"}, headers=auth, timeout=30)
    message = refused.json()["error"]["message"]
    assert refused.status_code == 400 and "event_ids" in message, message
    wrong = requests.get(served.url + "/v1/charts/SE?window=2h", timeout=30).json()["error"]
    assert wrong["code"] == "invalid_window", wrong
    assert all(
        part in wrong["message"] for part in ("window", "'2h'", "1h", "24h", "7d", "30d", "all")
    )
