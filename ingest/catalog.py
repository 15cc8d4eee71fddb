"""The marketplace catalog: `toplist catalog FILE` loads item rows that the shelves are
filtered by when read (sql/0017 `catalog_items`; the latest row per item wins).

A line is a JSON object: item_id (1-256 bytes), name (string), price_cents (non-negative
integer), and optionally restaurant_id (the restaurant that sells it, 1-128 bytes), photo_url
(an http or https URL of at most 2048 bytes), available (default true), deleted (default
false) and featured (default false: the restaurant's pick, shown on its shelf before it has
orders enough to rank). A bad line is reported with its number and reason and loads nothing;
the good lines load.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from clickhouse_connect.driver.client import Client

COLUMNS = [
    "item_id",
    "name",
    "price_cents",
    "restaurant_id",
    "photo_url",
    "available",
    "deleted",
    "featured",
]


@dataclass
class CatalogResult:
    loaded: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)  # (line number, reason)


def _row(line: str) -> list[object]:
    try:
        item = json.loads(line)
    except ValueError:
        raise ValueError("not valid JSON") from None
    if not isinstance(item, dict):
        raise ValueError("not a JSON object")
    item_id, name, price = item.get("item_id"), item.get("name"), item.get("price_cents")
    if not isinstance(item_id, str) or not 1 <= len(item_id.encode()) <= 256:
        raise ValueError("item_id: must be a string of 1 to 256 bytes")
    if not isinstance(name, str):
        raise ValueError("name: missing or not a string")
    if not isinstance(price, int) or isinstance(price, bool) or price < 0:
        raise ValueError("price_cents: missing, or not a non-negative integer")
    restaurant_id, photo_url = item.get("restaurant_id", ""), item.get("photo_url", "")
    if "restaurant_id" in item and (
        not isinstance(restaurant_id, str)
        or not 1 <= len(restaurant_id.encode()) <= 128
        or any(ord(c) < 0x20 or ord(c) == 0x7F for c in restaurant_id)
    ):
        raise ValueError("restaurant_id: must be a string of 1 to 128 bytes, no control characters")
    if "photo_url" in item and (
        not isinstance(photo_url, str)
        or not photo_url.startswith(("https://", "http://"))
        or len(photo_url.encode()) > 2048
        or any(c.isspace() or ord(c) < 0x20 for c in photo_url)
    ):
        raise ValueError("photo_url: must be an http or https URL of at most 2048 bytes")
    flags = []
    for flag, default in (("available", True), ("deleted", False), ("featured", False)):
        value = item.get(flag, default)
        if not isinstance(value, bool):
            raise ValueError(f"{flag}: must be true or false")
        flags.append(value)
    available, deleted, featured = flags
    return [item_id, name, price, restaurant_id, photo_url, available, deleted, featured]


def load_catalog(client: Client, database: str, lines: Iterable[str]) -> CatalogResult:
    result = CatalogResult()
    rows: dict[str, list[object]] = {}  # a file naming an item twice means its last line
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = _row(line)
        except ValueError as error:
            result.rejected.append((number, str(error)))
            continue
        rows.pop(str(row[0]), None)
        rows[str(row[0])] = row
    if rows:
        client.insert(f"{database}.catalog_items", list(rows.values()), column_names=COLUMNS)
    result.loaded = len(rows)
    return result
