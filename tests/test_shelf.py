"""A restaurant's public shelf (GET /v1/restaurants/<id>/popular-items) end to end on the
real engine: ranked from the shelves' snapshot, widened while a restaurant has too few orders
(1d -> 7d -> 28d -> its featured items), and its fallback list when the snapshot is too old or
cannot be read. Held to the references in tests/boards_reference.py."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from boards_reference import fallback_shelf, featured, restaurant_shelf

from api.app import create_app
from ingest.catalog import load_catalog
from ingest.load import load_lines
from publish.publisher import publish
from toplist.boards import BOARDS
from toplist.corrections import void_events

NOW = datetime(2026, 12, 4, 12, 0, 30, tzinfo=UTC)
AS_OF = NOW.replace(second=0)


class Events:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def add(self, restaurant: str, item: int, kind: str, ago: timedelta, count: int = 1) -> None:
        for _ in range(count):
            n = len(self.events)
            self.events.append(
                {
                    "event_id": f"shelf-{n:05d}",
                    "item_id": f"{restaurant}-{item}",
                    "restaurant_id": restaurant,
                    "city_id": "sf",
                    "type": kind,
                    "user_id": f"user-{n % 37}",
                    "event_time": AS_OF - ago - timedelta(seconds=n % 50),
                }
            )

    def lines(self) -> list[str]:
        return [
            json.dumps({**e, "event_time": e["event_time"].isoformat().replace("+00:00", "Z")})
            for e in self.events
        ]


def catalog_of(restaurants: dict[str, int]) -> list[dict]:
    """Items <restaurant>-0..n-1: -1 deleted, -5 unavailable, -2 and -3 featured (-3 is also
    unavailable, so never shown)."""
    return [
        {
            "item_id": f"{r}-{i}",
            "restaurant_id": r,
            "name": f"Dish {i} of {r}",
            "price_cents": 700 + i,
            "photo_url": f"https://img.example.com/{r}-{i}.jpg",
            "available": i not in (3, 5),
            "deleted": i == 1,
            "featured": i in (2, 3),
        }
        for r, n in restaurants.items()
        for i in range(n)
    ]


def scenario() -> tuple[Events, list[dict]]:
    e = Events()
    hour, day = timedelta(hours=1), timedelta(days=1)
    # busy: 30 orders today, its best seller deleted from the catalog; views rank otherwise
    for item, orders in [(1, 12), (0, 9), (4, 5), (6, 4)]:
        e.add("busy", item, "order", 2 * hour, orders)
    e.add("busy", 6, "view", 3 * hour, 20)
    e.add("busy", 0, "view", 3 * hour, 7)
    # weekly: 5 orders today, 25 more three days ago
    e.add("weekly", 0, "order", hour, 5)
    e.add("weekly", 4, "order", 3 * day, 15)
    e.add("weekly", 2, "order", 3 * day, 10)
    # monthly: 2 today, 3 this week, 20 three weeks ago
    e.add("monthly", 0, "order", hour, 2)
    e.add("monthly", 6, "order", 2 * day, 3)
    e.add("monthly", 7, "order", 21 * day, 20)
    # fresh: 3 orders in all: its featured items
    e.add("fresh", 0, "order", hour, 3)
    # old: 40 orders, all more than 28 days ago: featured while ranked, its orders on fallback
    e.add("old", 4, "order", 40 * day, 25)
    e.add("old", 6, "order", 35 * day, 15)
    # new: no orders yet (its catalog only); an order in the minute of as_of counts nowhere
    e.add("busy", 6, "order", timedelta(0), 1)
    catalog = catalog_of({"busy": 8, "weekly": 6, "monthly": 8, "fresh": 4, "old": 8, "new": 4})
    return e, catalog


def published(client, config) -> tuple[Events, list[dict], str]:
    e, catalog = scenario()
    lines = e.lines()
    for start in range(0, len(lines), 50):
        load_lines(client, config.database, lines[start : start + 50], board=BOARDS["popular"])
    assert load_catalog(client, config.database, [json.dumps(r) for r in catalog]).loaded
    snapshot = publish(client, config, board="popular", as_of=AS_OF + timedelta(seconds=9))
    assert snapshot.as_of == AS_OF
    return e, catalog, snapshot.snapshot_id


def shelf(api, restaurant: str, query: str = "") -> dict:
    answer = api.get(f"/v1/restaurants/{restaurant}/popular-items{query}")
    assert answer.status_code == 200, answer.get_json()
    assert answer.headers["Cache-Control"] == "no-cache"
    return answer.get_json()


def items(body: dict) -> list[tuple[str, int | None]]:
    assert [row["rank"] for row in body["items"]] == list(range(1, len(body["items"]) + 1))
    return [(row["item_id"], row["score"]) for row in body["items"]]


def test_a_restaurants_shelf_widens_while_it_has_too_few_orders(client, config):
    e, catalog, snapshot_id = published(client, config)
    api = create_app(config).test_client()
    seen = {}
    for restaurant in ("busy", "weekly", "monthly", "fresh", "old", "new", "nobody"):
        for metric, window, k in [("orders", "1d", 8), ("views", "1d", 8), ("orders", "7d", 2)]:
            query = f"?metric={metric}&window={window}&k={k}"
            body = shelf(api, restaurant, query)
            used, expected = restaurant_shelf(
                e.events, catalog, restaurant, AS_OF, metric, window, k
            )
            assert (body["window_used"], items(body)) == (used, expected), (restaurant, query)
            assert body["source"] == "batch" and body["as_of"] == "2026-12-04T12:00:00Z"
            assert body["snapshot_id"] == snapshot_id
            assert (body["restaurant_id"], body["metric"], body["window"], body["k"]) == (
                restaurant,
                metric,
                window,
                k,
            )
            seen.setdefault(restaurant, used)
    assert seen == {
        "busy": "1d",
        "weekly": "7d",
        "monthly": "28d",
        "fresh": "featured",
        "old": "featured",
        "new": "featured",
        "nobody": "featured",
    }
    busy = shelf(api, "busy")
    assert [row["item_id"] for row in busy["items"]] == ["busy-0", "busy-4", "busy-6"]
    assert busy["items"][0] == {
        "rank": 1,
        "item_id": "busy-0",
        "score": 9,
        "name": "Dish 0 of busy",
        "price_cents": 700,
        "photo_url": "https://img.example.com/busy-0.jpg",
        "available": True,
    }
    # Pages: every item once, in order, the last page short, past the end empty; the window
    # used is chosen on the whole shelf (weekly's second page is still its 7d list).
    for restaurant in ("busy", "weekly", "monthly"):
        whole = shelf(api, restaurant, "?k=8")
        pages = [shelf(api, restaurant, f"?k=2&offset={at}") for at in (0, 2, 4, 6)]
        assert {page["window_used"] for page in pages} == {whole["window_used"]}
        paged = [(row["item_id"], row["score"]) for page in pages for row in page["items"]]
        assert paged == [(row["item_id"], row["score"]) for row in whole["items"]]
        assert [row["rank"] for page in pages for row in page["items"]] == list(
            range(1, len(paged) + 1)
        )
    assert shelf(api, "weekly", "?k=2&offset=300")["items"] == []
    assert api.get("/v1/restaurants/busy/popular-items?offset=301").status_code == 400
    fresh = shelf(api, "fresh")
    assert items(fresh) == featured(catalog, "fresh", 8) == [("fresh-2", None)]
    assert shelf(api, "nobody")["items"] == []  # no orders and nothing featured

    # The catalog decides at read time: busy-0 withdrawn, the shelf shows the next.
    load_catalog(client, config.database, [json.dumps({**catalog[0], "available": False})])
    assert [row["item_id"] for row in shelf(api, "busy")["items"]] == ["busy-4", "busy-6"]

    for query, code in [
        ("?k=21", "invalid_k"),
        ("?k=0", "invalid_k"),
        ("?window=1h", "invalid_window"),
        ("?metric=likes", "invalid_metric"),
    ]:
        answer = api.get(f"/v1/restaurants/busy/popular-items{query}")
        assert answer.status_code == 400 and answer.get_json()["error"]["code"] == code
    answer = api.get("/v1/restaurants/bad%01id/popular-items")
    assert answer.status_code == 400
    assert answer.get_json()["error"]["code"] == "invalid_restaurant_id"


def test_an_old_or_unreadable_snapshot_gives_each_restaurant_its_fallback_shelf(client, config):
    db = config.database
    before = create_app(config).test_client()
    nothing = shelf(before, "busy")  # nothing published yet: no ranking, no fallback list
    assert (nothing["source"], nothing["window_used"], nothing["as_of"]) == (
        "fallback",
        "featured",
        None,
    )
    assert items(nothing) == []  # the catalog is not loaded either

    e, catalog, _ = published(client, config)
    refund = next(x["event_id"] for x in e.events if x["item_id"] == "busy-4")
    void_events(client, db, [refund], "refund", board="popular")
    publish(client, config, board="popular", as_of=AS_OF + timedelta(minutes=1))
    as_of = AS_OF + timedelta(minutes=1)

    old = create_app(replace(config, shelf_fallback_after_seconds=0.001)).test_client()
    for restaurant in ("busy", "weekly", "monthly", "old"):
        body = shelf(old, restaurant, "?metric=views&window=7d&k=3")
        expected = fallback_shelf(e.events, catalog, restaurant, as_of, 3, frozenset([refund]))
        assert (body["source"], body["window_used"], body["metric"]) == (
            "fallback",
            "all",
            "orders",
        )
        assert items(body) == expected and expected, restaurant
        assert body["as_of"] == "2026-12-04T12:01:00Z" and body["snapshot_id"] is None
    assert dict(items(shelf(old, "busy", "?k=8")))["busy-4"] == 4  # 5 orders, one refunded
    fresh = shelf(old, "fresh")  # 3 orders: too few to rank, enough for its fallback list
    assert (fresh["source"], fresh["window_used"], items(fresh)) == (
        "fallback",
        "all",
        [("fresh-0", 3)],
    )
    new = shelf(old, "new")  # no orders ever: its featured items
    assert (new["source"], new["window_used"], items(new)) == (
        "fallback",
        "featured",
        [("new-2", None)],
    )

    # The ranked lists cannot be read: the fallback list, which does not need them.
    client.command(f"RENAME TABLE {db}.board_entries TO {db}.board_entries_away")
    try:
        body = shelf(create_app(config).test_client(), "weekly")
    finally:
        client.command(f"RENAME TABLE {db}.board_entries_away TO {db}.board_entries")
    assert body["source"] == "fallback"
    assert items(body) == fallback_shelf(e.events, catalog, "weekly", as_of, 8)


def test_the_catalog_takes_photos_and_featured_items_and_names_each_bad_line(client, config):
    good = {"item_id": "x-1", "name": "Soup", "price_cents": 450}
    lines = [
        json.dumps({**good, "restaurant_id": "r1", "photo_url": "https://img.example.com/1.jpg"}),
        json.dumps({**good, "item_id": "x-2", "restaurant_id": "r1", "featured": True}),
        json.dumps({**good, "item_id": "x-3", "photo_url": "ftp://img.example.com/3.jpg"}),
        json.dumps({**good, "item_id": "x-4", "photo_url": "https://x/" + "a" * 2048}),
        json.dumps({**good, "item_id": "x-5", "featured": "yes"}),
        json.dumps({**good, "item_id": "x-6", "restaurant_id": ""}),
        json.dumps({**good, "item_id": "x-7", "restaurant_id": "r\n1"}),
    ]
    result = load_catalog(client, config.database, lines)
    assert result.loaded == 2
    assert result.rejected == [
        (3, "photo_url: must be an http or https URL of at most 2048 bytes"),
        (4, "photo_url: must be an http or https URL of at most 2048 bytes"),
        (5, "featured: must be true or false"),
        (6, "restaurant_id: must be a string of 1 to 128 bytes, no control characters"),
        (7, "restaurant_id: must be a string of 1 to 128 bytes, no control characters"),
    ]
    rows = client.query(
        f"SELECT item_id, restaurant_id, photo_url, featured FROM {config.database}.catalog_items"
        " ORDER BY item_id"
    ).result_rows
    assert rows == [
        ("x-1", "r1", "https://img.example.com/1.jpg", False),
        ("x-2", "r1", "", True),
    ]
