"""The other boards' read API (DESIGN.md "The other boards"), each from its latest snapshot:

* `GET /v1/listeners?k=10`: current listeners per song;
* `GET /v1/sale/products?k=100`, `GET /v1/sale/buyers?k=100`: the flash sale's top products
  by units and top buyers by spend, with the sale's totals; `GET /v1/sale/products/<id>` and
  `GET /v1/sale/buyers/<id>`: one product's or buyer's rank and score, and with `/around` its
  neighbours on the board;
* `GET /v1/topk?scope=city:sf&metric=views&window=1h&k=50`: a marketplace shelf, left
  without the items the catalog says are unavailable, deleted or unknown, read at request
  time from a stored list longer than k (so the shelf still fills);
* `GET /v1/restaurants/<id>/popular-items?k=8&metric=orders&window=1d`: a restaurant's public
  shelf, never empty: a restaurant with too few orders in the window is shown a wider one
  (1d -> 7d -> 28d) and then its featured items, and when the shelves' snapshot is older than
  TOPLIST_SHELF_FALLBACK_AFTER_SECONDS (or cannot be read) the shelf is its fallback list, its
  top items by all-time orders as the last publication left them (`source: "fallback"`).

Answers drawn only from a snapshot are cached and tagged as the charts' are (api/charts.py
`from_snapshot`). A shelf also depends on the catalog: it is cached the same way where the
catalog rows came with the snapshot (the API workers' snapshot files; embedded, the catalog
cannot change while the one process that owns the data serves), and never where the catalog
is read at request time (a ClickHouse server, which anyone may write to).
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime

from flask import Blueprint, Response, jsonify, request

from api.charts import (
    current,
    freshness,
    from_snapshot,
    parse_k,
    parse_n,
    parse_offset,
    snapshot_header,
)
from api.errors import ApiError
from api.snapshots import Board, Entry, SnapshotStore
from api.state import toplist
from toplist.config import (
    POPULAR_METRICS,
    POPULAR_WINDOWS,
    SCORINGS,
    SHELF_K_MAX,
    SHELF_WINDOWS,
)
from toplist.snapshots import CatalogItem, Snapshot, iso

log = logging.getLogger(__name__)

boards = Blueprint("boards", __name__)

# As api/openapi.yaml says: an id of 1 to 128 characters, none of them a control character.
_ID = r"[^\x00-\x1f\x7f]{1,128}"
_SHELF_SCOPE = re.compile(rf"(?:global|(?:restaurant|city):{_ID})")
_RESTAURANT = re.compile(_ID)

# What the sale's totals say of their distinct buyers, and of a product's (uniqCombined's
# documented behaviour, ClickHouse docs).
DISTINCT_BUYERS_ERROR = (
    "exact: the buyers with an order that is not voided. A product's distinct_buyers is"
    " approximate (uniqCombined): exact up to hash collisions while its buyers fit the array"
    " and hash-table phases, then HyperLogLog with 2^17 cells, a relative standard error of"
    " about 0.3%"
)


def _store(board: str) -> SnapshotStore:
    return toplist().stores[board]


def _board(snapshot: Snapshot, metric: str, window: str, scope: str, scoring: str = "v1") -> Board:
    return _store(snapshot.board).board(snapshot, metric, window, scope, scoring=scoring)


def _scoring_version() -> str:
    """?scoring_version= of a shelf, by default TOPLIST_SCORING_VERSION (macros/scoring.sql)."""
    version = request.args.get("scoring_version", toplist().config.scoring_version)
    if version not in SCORINGS:
        raise ApiError(
            400,
            "invalid_scoring_version",
            f"scoring_version must be one of {', '.join(SCORINGS)}, got {version!r}",
        )
    return version


def _scored(snapshot: Snapshot, version: str) -> str:
    """The version, when the snapshot holds it; a 404 saying which it holds otherwise."""
    if version not in snapshot.scorings:
        raise ApiError(
            404,
            "scoring_version_not_published",
            f"snapshot {snapshot.snapshot_id} holds the scoring versions"
            f" {', '.join(snapshot.scorings)} only, not {version} (backfill it with"
            " POST /internal/rebuild)",
        )
    return version


def _int_stats(snapshot: Snapshot, *names: str) -> dict[str, int]:
    return {name: int(snapshot.stats.get(name, 0)) for name in names}


@boards.get("/v1/listeners")
def listeners():  # type: ignore[no-untyped-def]
    config = toplist().config
    k = parse_k(config.default_k, config.board_keep_top)
    offset = parse_offset(config.board_keep_top)
    snapshot = current("listeners")

    def body(stale: bool) -> dict[str, object]:
        board = _board(snapshot, "listeners", "now", "global")
        return {
            "k": k,
            **snapshot_header(snapshot, None, stale),
            **_int_stats(snapshot, "users"),
            "items": [
                {"rank": e.rank, "song_id": e.item_id, "listeners": e.score, **e.movement()}
                for e in board.page(k, offset)
            ],
        }

    return from_snapshot(snapshot, ("listeners", k, offset), body)


_SALE = {
    # board scope: (metric, id field, score field, extra fields)
    "products": ("units", "product_id", "units", ("orders", "distinct_buyers")),
    "buyers": ("spend_cents", "buyer_id", "spend_cents", ("orders", "units")),
}


def _sale_row(scope: str, entry: Entry) -> dict[str, object]:
    _, id_field, score_field, extra = _SALE[scope]
    row: dict[str, object] = {"rank": entry.rank, id_field: entry.item_id, score_field: entry.score}
    row.update({name: int(entry.extra.get(name, 0)) for name in extra})
    row.update(entry.movement())
    return row


def _sale_totals(snapshot: Snapshot) -> dict[str, object]:
    return {
        **_int_stats(snapshot, "orders", "units", "spend_cents", "products", "distinct_buyers"),
        "distinct_buyers_error": DISTINCT_BUYERS_ERROR,
    }


@boards.get("/v1/sale/<any(products, buyers):scope>")
def sale_board(scope: str):  # type: ignore[no-untyped-def]
    config = toplist().config
    k = parse_k(100, config.board_keep_top)
    offset = parse_offset(config.board_keep_top)
    snapshot = current("sale")
    metric = _SALE[scope][0]

    def body(stale: bool) -> dict[str, object]:
        board = _board(snapshot, metric, "all", scope)
        return {
            "board": scope,
            "metric": metric,
            "k": k,
            **snapshot_header(snapshot, None, stale),
            "totals": _sale_totals(snapshot),
            "items": [_sale_row(scope, entry) for entry in board.page(k, offset)],
        }

    return from_snapshot(snapshot, ("sale", scope, k, offset), body)


def _sale_not_ranked(snapshot: Snapshot, scope: str, item_id: str) -> ApiError:
    what = scope[:-1]
    return ApiError(
        404,
        f"{what}_not_ranked",
        f"{what} {item_id!r} has no orders in snapshot {snapshot.snapshot_id}"
        f" (snapshots keep the top {snapshot.keep_top} {scope})",
    )


@boards.get("/v1/sale/<any(products, buyers):scope>/<path:item_id>/around")
def sale_around(scope: str, item_id: str):  # type: ignore[no-untyped-def]
    """A product or buyer with the n entries above and below it on its sale board."""
    n = parse_n()
    snapshot = current("sale")
    metric, id_field = _SALE[scope][0], _SALE[scope][1]
    around = _board(snapshot, metric, "all", scope).around(item_id, n)
    if around is None:
        raise _sale_not_ranked(snapshot, scope, item_id)
    centre = next(e for e in around if e.item_id == item_id)
    return from_snapshot(
        snapshot,
        ("sale", scope, "around", item_id, n),
        lambda stale: {
            "board": scope,
            "metric": metric,
            "n": n,
            **snapshot_header(snapshot, None, stale),
            id_field: item_id,
            "rank": centre.rank,
            "items": [_sale_row(scope, entry) for entry in around],
        },
    )


@boards.get("/v1/sale/<any(products, buyers):scope>/<path:item_id>")
def sale_rank(scope: str, item_id: str):  # type: ignore[no-untyped-def]
    snapshot = current("sale")
    metric = _SALE[scope][0]
    entry = _board(snapshot, metric, "all", scope).by_item.get(item_id)
    if entry is None:
        raise _sale_not_ranked(snapshot, scope, item_id)
    return from_snapshot(
        snapshot,
        ("sale", scope, "item", item_id),
        lambda stale: {**snapshot_header(snapshot, None, stale), **_sale_row(scope, entry)},
    )


def _shelf_args() -> tuple[str, str, str, int, int]:
    config = toplist().config
    scope = request.args.get("scope", "global")
    if not _SHELF_SCOPE.fullmatch(scope):
        raise ApiError(
            400,
            "invalid_scope",
            f"scope must be global, restaurant:<id> or city:<id>, got {scope!r}",
        )
    metric = _one_of("metric", POPULAR_METRICS, "views")
    window = _one_of("window", POPULAR_WINDOWS, "1h")
    k = parse_k(config.default_k, config.popular_k_max)
    return scope, metric, window, k, parse_offset(config.popular_keep_top)


def _one_of(name: str, allowed: tuple[str, ...], default: str) -> str:
    value = request.args.get(name, default)
    if value not in allowed:
        raise ApiError(
            400, f"invalid_{name}", f"{name} must be one of {', '.join(allowed)}, got {value!r}"
        )
    return value


@boards.get("/v1/topk")
def topk():  # type: ignore[no-untyped-def]
    scope, metric, window, k, offset = _shelf_args()
    version = _scoring_version()
    snapshot = current("popular")
    _scored(snapshot, version)
    store = _store("popular")

    def body(stale: bool) -> dict[str, object]:
        board = _board(snapshot, metric, window, scope, version)
        shown = store.shown_items(snapshot, [entry.item_id for entry in board.entries])
        items: list[dict[str, object]] = []
        place = hidden = 0  # places on the shelf so far; ranked items left out up to the last
        for entry in board.entries:
            if len(items) == k:
                break
            if entry.item_id not in shown:
                hidden += 1
                continue
            place += 1
            if place <= offset:  # on an earlier page
                continue
            item = shown[entry.item_id]
            items.append(
                {
                    "rank": place,
                    "item_id": entry.item_id,
                    "name": item.name,
                    "price_cents": item.price_cents,
                    metric: entry.score,
                    **entry.movement(),
                }
            )
        return {
            "scope": scope,
            "metric": metric,
            "window": window,
            "scoring_version": version,
            "k": k,
            **snapshot_header(snapshot, None, stale),
            "hidden": hidden,
            "items": items,
        }

    if store.catalog_in_snapshot:  # the catalog rows came with the snapshot: fixed by it
        return from_snapshot(snapshot, ("topk", scope, metric, window, version, k, offset), body)
    stale, _, _ = freshness(toplist().config, snapshot)
    return _no_cache(body(stale))


def _no_cache(body: dict[str, object]) -> Response:
    response = jsonify(body)
    response.cache_control.no_cache = True  # the catalog may change before the next snapshot
    return response


def _on_shelf(
    store: SnapshotStore, snapshot: Snapshot | None, ranked: list[tuple[str, int | None]], k: int
) -> list[dict[str, object]]:
    """The first k of `ranked` [(item_id, score)] that the catalog lets a shelf show, ranked
    again 1..k among themselves, with what the catalog says of each."""
    return _shelf_items(store.shown_items(snapshot, [item_id for item_id, _ in ranked]), ranked, k)


def _shelf_items(
    shown: dict[str, CatalogItem], ranked: list[tuple[str, int | None]], k: int
) -> list[dict[str, object]]:
    """The first k of `ranked` that are in `shown`, ranked 1..k, with their catalog fields."""
    items: list[dict[str, object]] = []
    for item_id, score in ranked:
        item: CatalogItem | None = shown.get(item_id)
        if item is None:
            continue
        items.append(
            {
                "rank": len(items) + 1,
                "item_id": item_id,
                "score": score,
                "name": item.name,
                "price_cents": item.price_cents,
                "photo_url": item.photo_url or None,
                "available": True,  # the catalog lets it show
            }
        )
        if len(items) == k:
            break
    return items


def _featured(store: SnapshotStore, restaurant_id: str, k: int) -> list[dict[str, object]]:
    featured = store.featured(restaurant_id)  # the catalog's rows, of items it lets show
    return _shelf_items(featured, [(item_id, None) for item_id in featured], k)


@boards.get("/v1/restaurants/<path:restaurant_id>/popular-items")
def restaurant_shelf(restaurant_id: str):  # type: ignore[no-untyped-def]
    """A restaurant's public shelf: ranked from the shelves' snapshot (`source: "batch"`),
    widened while the restaurant has fewer than TOPLIST_SHELF_MIN_ORDERS orders in the window
    (`window_used`: 1d, 7d, 28d, then `featured`), or its fallback list when the snapshot is
    older than TOPLIST_SHELF_FALLBACK_AFTER_SECONDS or cannot be read."""
    config = toplist().config
    if not _RESTAURANT.fullmatch(restaurant_id):
        raise ApiError(
            400,
            "invalid_restaurant_id",
            f"a restaurant id is 1 to 128 characters, none of them a control character,"
            f" got {restaurant_id!r}",
        )
    k = parse_k(8, SHELF_K_MAX)
    offset = parse_offset(config.popular_keep_top)
    metric = _one_of("metric", POPULAR_METRICS, "orders")
    window = _one_of("window", SHELF_WINDOWS, "1d")
    version = _scoring_version()
    store = _store("popular")
    head = {"restaurant_id": restaurant_id, "window": window, "k": k}
    # The shelf is chosen on its whole shown list (a page past its end is empty, not a reason
    # to widen), drawn up to the page's end; the page is its last k.
    upto = offset + k

    snapshot, why = None, ""
    try:
        snapshot = store.current()
        if snapshot is None:
            why = "no snapshot of the shelves has been published yet"
        else:
            age = (datetime.now(UTC) - snapshot.published_at).total_seconds()
            if age > config.shelf_fallback_after_seconds:
                why = f"the shelves' snapshot was published {age:.0f} s ago"
            else:
                _scored(snapshot, version)
                shelf = _ranked_shelf(store, snapshot, restaurant_id, metric, window, version, upto)
                return _no_cache({**head, **shelf, "items": shelf["items"][offset:]})
    except ApiError:
        raise
    except Exception:  # the ranking cannot be read: the shelf is the fallback list
        log.exception("restaurant %r: the shelves' snapshot cannot be read", restaurant_id)
        why = "the shelves' snapshot cannot be read"
    log.info("restaurant %r: fallback shelf (%s)", restaurant_id, why)
    as_of, ranked = store.fallback(restaurant_id)
    items = _on_shelf(store, None, list(ranked), upto)
    used = "all"
    if not items:
        items, used = _featured(store, restaurant_id, upto), "featured"
    return _no_cache(
        {
            **head,
            "as_of": iso(as_of) if as_of else None,
            "snapshot_id": None,
            "metric": "orders",  # the fallback list ranks by all-time orders
            "scoring_version": "v1",
            "window_used": used,
            "source": "fallback",
            "items": items[offset:],
        }
    )


def _ranked_shelf(
    store: SnapshotStore,
    snapshot: Snapshot,
    restaurant_id: str,
    metric: str,
    window: str,
    version: str,
    k: int,
) -> dict[str, object]:
    """The shelf from the snapshot: the first window from `window` on in which the restaurant
    has TOPLIST_SHELF_MIN_ORDERS orders (counted by v1) and an item to show, ranked by the
    scoring version; else its featured items."""
    min_orders = toplist().config.shelf_min_orders
    scope = f"restaurant:{restaurant_id}"
    items: list[dict[str, object]] = []
    used = "featured"
    for wider in SHELF_WINDOWS[SHELF_WINDOWS.index(window) :]:
        orders = _board(snapshot, "orders", wider, scope)
        # Exact below the kept depth; a full kept list holds at least that many orders, and
        # the kept depth is never below the minimum (toplist/config.py).
        if sum(entry.score for entry in orders.entries) < min_orders:
            continue
        ranked = (
            orders
            if (metric, version) == ("orders", "v1")
            else _board(snapshot, metric, wider, scope, version)
        )
        items = _on_shelf(store, snapshot, [(e.item_id, e.score) for e in ranked.entries], k)
        if items:
            used = wider
            break
    if not items:
        items = _featured(store, restaurant_id, k)
    return {
        "as_of": iso(snapshot.as_of),
        "snapshot_id": snapshot.snapshot_id,
        "metric": metric,
        "scoring_version": version,
        "window_used": used,
        "source": "batch",
        "items": items,
    }
