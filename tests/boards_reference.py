"""Independent references for the other boards, in plain Python, to hold the SQL to.

Each takes the distinct events a generator made (ingest/board_events.py) and says what the
board must show; ranking is the v1 policy: score descending, then the id bytewise. `entries`
reads what a snapshot published, to compare.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta

from toplist.config import POPULAR_WINDOW_SECONDS


def ranked(scores: dict[str, int], keep: int = 1000) -> list[tuple[str, int]]:
    rows = [(item, score) for item, score in scores.items() if score > 0]
    return sorted(rows, key=lambda row: (-row[1], row[0].encode()))[:keep]


def current_listeners(
    reports: Iterable[dict],
    as_of: datetime | None = None,
    expiry_seconds: int = 0,
    retention_hours: int = 0,
) -> dict[str, str]:
    """user -> the song they count for now.

    Replays each playback's reports in the order that matters, whatever order they came in:
    a playback is open if its latest START/STOP (by version; at one version STOP wins) is a
    START; expired if nothing was heard from it for expiry_seconds before as_of; a user with
    several open playbacks listens to the one started last. With retention_hours, only the
    reports of as_of's hour and the retention_hours before it are replayed."""
    playbacks: dict[tuple[str, str], dict] = {}
    if retention_hours:
        oldest = as_of.replace(minute=0, second=0, microsecond=0) - timedelta(hours=retention_hours)
        reports = [
            r
            for r in reports
            if r["event_time"].replace(minute=0, second=0, microsecond=0) >= oldest
        ]
    for report in reports:
        key = (report["user_id"], report["playback_id"])
        state = playbacks.setdefault(
            key, {"latest": None, "song": None, "song_key": None, "started": None, "seen": None}
        )
        moment = report["event_time"]
        state["seen"] = moment if state["seen"] is None else max(state["seen"], moment)
        if report["type"] == "HEARTBEAT":
            continue
        order = (report["version"], report["type"] == "STOP")
        if state["latest"] is None or order > state["latest"]:
            state["latest"] = order
        if report["type"] == "START":
            song_key = (report["version"], moment, report["song_id"])
            if state["song_key"] is None or song_key > state["song_key"]:
                state["song_key"] = song_key
                state["song"] = report["song_id"]
            state["started"] = moment if state["started"] is None else max(state["started"], moment)
    current: dict[str, tuple] = {}
    for (user, playback), state in playbacks.items():
        if state["latest"] is None or state["latest"][1] or state["song"] is None:
            continue
        if expiry_seconds and state["seen"] < as_of - timedelta(seconds=expiry_seconds):
            continue
        choice = (state["started"], state["latest"][0], playback)
        if user not in current or choice > current[user][0]:
            current[user] = (choice, state["song"])
    return {user: song for user, (_choice, song) in current.items()}


def listeners_board(current: dict[str, str]) -> list[tuple[str, int]]:
    return ranked(Counter(current.values()))


def sale_boards(orders: Iterable[dict]) -> dict[str, list[tuple[str, int]]]:
    """{'products': [(product, units)], 'buyers': [(buyer, spend_cents)]}, one copy per
    event_id."""
    unique = {order["event_id"]: order for order in orders}
    units: dict[str, int] = defaultdict(int)
    spend: dict[str, int] = defaultdict(int)
    for order in unique.values():
        units[order["product_id"]] += order["units"]
        spend[order["buyer_id"]] += order["amount_cents"]
    return {"products": ranked(units), "buyers": ranked(spend)}


def distinct_buyers(orders: Iterable[dict]) -> tuple[dict[str, int], int]:
    """Exact distinct buyers per product and in total."""
    per_product: dict[str, set[str]] = defaultdict(set)
    for order in orders:
        per_product[order["product_id"]].add(order["buyer_id"])
    every = set().union(*per_product.values()) if per_product else set()
    return {product: len(buyers) for product, buyers in per_product.items()}, len(every)


POPULAR_WINDOWS = {
    name: timedelta(seconds=length) for name, length in POPULAR_WINDOW_SECONDS.items()
}


def bucket(moment: datetime) -> datetime:
    return moment.replace(minute=moment.minute - moment.minute % 10, second=0, microsecond=0)


def shelf_bucket(moment: datetime) -> datetime:
    """The shelves' 10-second bucket of a moment: their rows' and their as_of's alignment."""
    return moment.replace(second=moment.second - moment.second % 10, microsecond=0)


def shelves(
    events: Iterable[dict], as_of: datetime, keep: int = 300
) -> dict[tuple[str, str, str], list[tuple[str, int]]]:
    """{(scope, metric, window): [(item, score)]}: views counted once per user, item and
    10-minute bucket, orders once per event_id, among events in as_of - W <= bucket < as_of
    (as_of on 10 seconds: `shelf_bucket`)."""
    as_of = shelf_bucket(as_of)
    unique = {event["event_id"]: event for event in events}
    counted: dict[tuple[str, str, str, str], set] = defaultdict(set)
    for event in unique.values():
        moment = shelf_bucket(event["event_time"])
        metric = "views" if event["type"] == "view" else "orders"
        what = (
            (event["user_id"], bucket(event["event_time"]))
            if metric == "views"
            else event["event_id"]
        )
        scopes = (f"restaurant:{event['restaurant_id']}", f"city:{event['city_id']}", "global")
        for window, length in POPULAR_WINDOWS.items():
            if not as_of - length <= moment < as_of:
                continue
            for scope in scopes:
                counted[(scope, metric, window, event["item_id"])].add(what)
    scores: dict[tuple[str, str, str], dict[str, int]] = defaultdict(dict)
    for (scope, metric, window, item), things in counted.items():
        scores[(scope, metric, window)][item] = len(things)
    return {shelf: ranked(items, keep) for shelf, items in scores.items()}


def entries(client, db: str, snapshot_id: str) -> dict[tuple[str, str, str], list]:
    """A published snapshot's lists: {(scope, metric, window): [(item, score, extra)]} in
    rank order (checking that the ranks are 1..n)."""
    rows = client.query(
        f"""
        SELECT scope, metric, window_name, item_id, score, rank, extra FROM {db}.board_entries
        WHERE snapshot_id = {{id:String}} ORDER BY scope, metric, window_name, rank
        """,
        parameters={"id": snapshot_id},
    ).result_rows
    boards: dict[tuple[str, str, str], list] = {}
    for scope, metric, window, item, score, rank, extra in rows:
        board = boards.setdefault((scope, metric, window), [])
        assert rank == len(board) + 1, f"{scope}/{metric}/{window}: ranks are not 1..n"
        board.append((item, score, extra))
    return boards


def restaurant_shelf(
    events: Iterable[dict],
    catalog: Iterable[dict],
    restaurant: str,
    as_of: datetime,
    metric: str = "orders",
    window: str = "1d",
    k: int = 8,
    min_orders: int = 20,
) -> tuple[str, list[tuple[str, int | None]]]:
    """A restaurant's public shelf from the snapshot at as_of: (window used, [(item, score)]).
    The first window from `window` on (1d, 7d, 28d) in which the restaurant has min_orders
    orders and an item the catalog lets it show; else its featured items that may show."""
    lists = shelves(events, as_of)
    shown = {row["item_id"] for row in catalog if row.get("available", True) and not row["deleted"]}
    chain = ("1d", "7d", "28d")
    for wider in chain[chain.index(window) :]:
        scope = f"restaurant:{restaurant}"
        if sum(score for _, score in lists.get((scope, "orders", wider), [])) < min_orders:
            continue
        items = [(i, s) for i, s in lists.get((scope, metric, wider), []) if i in shown][:k]
        if items:
            return wider, items
    return "featured", featured(catalog, restaurant, k)


def featured(catalog: Iterable[dict], restaurant: str, k: int) -> list[tuple[str, int | None]]:
    rows = [
        row["item_id"]
        for row in catalog
        if row.get("restaurant_id") == restaurant
        and row.get("featured")
        and row.get("available", True)
        and not row["deleted"]
    ]
    return [(item, None) for item in sorted(rows, key=str.encode)][:k]


def fallback_shelf(
    events: Iterable[dict],
    catalog: Iterable[dict],
    restaurant: str,
    as_of: datetime,
    k: int = 8,
    voided: frozenset[str] = frozenset(),
) -> list[tuple[str, int]]:
    """A restaurant's top items by all-time orders before as_of (each event_id once, voided
    ones left out) that the catalog lets a shelf show, the top 20 kept and k of them shown."""
    unique = {event["event_id"]: event for event in events}
    orders = Counter(
        event["item_id"]
        for event in unique.values()
        if event["type"] == "order"
        and event["restaurant_id"] == restaurant
        and shelf_bucket(event["event_time"]) < shelf_bucket(as_of)
        and event["event_id"] not in voided
    )
    shown = {row["item_id"] for row in catalog if row.get("available", True) and not row["deleted"]}
    return [(i, s) for i, s in ranked(orders, keep=20) if i in shown][:k]


def scored_shelves(
    events: Iterable[dict], as_of: datetime, version: str, keep: int = 300
) -> dict[tuple[str, str, str], list[tuple[str, int]]]:
    """The shelves scored by a scoring version (macros/scoring.sql): v1 each metric's count;
    v2 views, and orders x 5 + views for an item with orders. An item is on a metric's shelf
    when it has that metric in the window."""
    counts = shelves(events, as_of, keep=10**9)
    views: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for (scope, metric, window), items in counts.items():
        if metric == "views":
            views[(scope, window)] = dict(items)
    if version == "v1":
        return {shelf: items[:keep] for shelf, items in counts.items()}
    scored = {}
    for (scope, metric, window), items in counts.items():
        seen = views[(scope, window)]
        scores = {i: s * 5 + seen.get(i, 0) if metric == "orders" else s for i, s in items}
        scored[(scope, metric, window)] = ranked(scores, keep)
    return scored
