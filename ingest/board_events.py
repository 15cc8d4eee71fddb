"""Demo and test events for the other boards: playback reports, flash-sale orders, item events.

Deterministic for a seed. Each generator makes the awkward cases its board must survive:
repeated and shuffled reports, STOPs before their STARTs, superseded versions, users who
switch songs without a STOP, redelivered orders, ties, repeated views within 10 minutes,
and items the catalog hides. Lines are JSON strings, as a topic or `toplist load` gets them.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import accumulate


def _time(moment: datetime, rng: random.Random) -> str | int:
    """RFC 3339 or epoch milliseconds, as producers send either."""
    if rng.random() < 0.3:
        return int(moment.timestamp() * 1000)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _millis(moment: datetime) -> datetime:
    """To the millisecond, as the engine stores it."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def _lines(events: list[dict], rng: random.Random) -> list[str]:
    """The events as JSON lines (event_time, a datetime in `events`, written either way)."""
    return [
        json.dumps({**event, "event_time": _time(event["event_time"], rng)}) for event in events
    ]


@dataclass
class Events:
    """Lines to load, and the events they carry (each distinct event once, in `events`)."""

    lines: list[str] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    malformed: int = 0


def _zipf(count: int) -> list[float]:
    return list(accumulate(1.0 / (i + 1) for i in range(count)))


class PlaybackGenerator:
    """Playback reports of `users` listeners over `songs` songs."""

    MALFORMED = (
        "not json",
        json.dumps({"user_id": "u", "playback_id": "p", "type": "PAUSE", "version": 1,
                    "event_time": "2026-12-04T10:00:00Z", "song_id": "s"}),
        json.dumps({"user_id": "u", "playback_id": "p", "type": "START", "version": -1,
                    "event_time": "2026-12-04T10:00:00Z", "song_id": "s"}),
        json.dumps({"user_id": "u", "playback_id": "p", "type": "START", "version": 1,
                    "event_time": "2026-12-04T10:00:00Z"}),
        json.dumps({"playback_id": "p", "type": "STOP", "version": 1,
                    "event_time": "2026-12-04T10:00:00Z"}),
    )  # fmt: skip

    def __init__(self, seed: int = 5, users: int = 300, songs: int = 40) -> None:
        self.rng = random.Random(seed)
        self.users = users
        self.song_ids = [f"song-{i:03d}" for i in range(songs)]
        self.song_weights = _zipf(songs)
        self._round = 0

    def report(self, user: str, playback: str, song: str, kind: str, version: int,
               moment: datetime) -> dict:  # fmt: skip
        moment = _millis(moment)
        event = {"user_id": user, "playback_id": playback, "type": kind, "version": version,
                 "event_time": moment}  # fmt: skip
        if kind == "START" or self.rng.random() < 0.5:
            event["song_id"] = song
        return event

    def history(self, start: datetime, end: datetime, *, malformed: int = 0) -> Events:
        """Every user plays a few songs between start and end: some playbacks stop, some are
        restarted with a newer version, some are left open when the user switches song.
        Reports are repeated (10%) and shuffled, so STOPs often arrive before their STARTs."""
        out = Events()
        span = (end - start).total_seconds()
        self._round += 1
        for u in range(self.users):
            user = f"user-{u:04d}"
            moment = start + timedelta(seconds=self.rng.random() * span / 4)
            for p in range(self.rng.randint(1, 4)):
                playback = f"{user}-r{self._round}-pb{p}"
                song = self.rng.choices(self.song_ids, cum_weights=self.song_weights)[0]
                version = self.rng.randint(1, 3)
                reports = [self.report(user, playback, song, "START", version, moment)]
                fate = self.rng.random()
                later = moment + timedelta(seconds=self.rng.uniform(1, span / 8))
                if fate < 0.4:  # stopped
                    reports.append(self.report(user, playback, song, "STOP", version, later))
                elif fate < 0.55:  # stopped, then restarted with a newer version
                    reports.append(self.report(user, playback, song, "STOP", version, later))
                    reports.append(
                        self.report(
                            user, playback, song, "START", version + 1, later + timedelta(seconds=1)
                        )  # fmt: skip
                    )
                elif fate < 0.65:  # an old STOP of a superseded version arrives too
                    reports.append(self.report(user, playback, song, "STOP", version - 1, later))
                elif fate < 0.75:  # a heartbeat
                    reports.append(self.report(user, playback, song, "HEARTBEAT", version, later))
                out.events.extend(reports)
                moment = min(later + timedelta(seconds=2), end - timedelta(seconds=1))
        out.lines = _lines(out.events, self.rng)
        out.lines += [self.rng.choice(out.lines) for _ in range(len(out.lines) // 10)]
        for i in range(malformed):
            out.lines.append(self.MALFORMED[i % len(self.MALFORMED)])
            out.malformed += 1
        self.rng.shuffle(out.lines)
        return out


class OrderGenerator:
    """Flash-sale orders: a few hot products, buyers who come back, redelivered events."""

    MALFORMED = (
        "{oops",
        json.dumps({"event_id": "x1", "order_id": "o", "product_id": "p", "buyer_id": "b",
                    "units": 0, "amount_cents": 100, "event_time": "2026-12-04T10:00:00Z"}),
        json.dumps({"event_id": "x2", "order_id": "o", "product_id": "p", "buyer_id": "b",
                    "units": 1, "amount_cents": -5, "event_time": "2026-12-04T10:00:00Z"}),
        json.dumps({"event_id": "x3", "order_id": "o", "product_id": "p",
                    "units": 1, "amount_cents": 5, "event_time": "2026-12-04T10:00:00Z"}),
    )  # fmt: skip

    def __init__(self, seed: int = 6, products: int = 60, buyers: int = 2_000) -> None:
        self.rng = random.Random(seed)
        self.product_ids = [f"product-{i:03d}" for i in range(products)]
        self.product_weights = _zipf(products)
        self.prices = {p: self.rng.choice((499, 999, 1999, 4999)) for p in self.product_ids}
        self.buyers = buyers
        self._sequence = 0
        self._tag = f"{seed:x}"  # generators with other seeds make other event ids

    def orders(self, count: int, start: datetime, end: datetime, *, malformed: int = 0,
               retry_fraction: float = 0.05) -> Events:  # fmt: skip
        out = Events()
        span = (end - start).total_seconds()
        for _ in range(count):
            self._sequence += 1
            product = self.rng.choices(self.product_ids, cum_weights=self.product_weights)[0]
            units = self.rng.choice((1, 1, 1, 2, 3))
            out.events.append(
                {
                    "event_id": f"order-evt-{self._tag}-{self._sequence:07d}",
                    "order_id": f"order-{self._tag}-{self._sequence:07d}",
                    "product_id": product,
                    "buyer_id": f"buyer-{self.rng.randrange(self.buyers):05d}",
                    "units": units,
                    "amount_cents": units * self.prices[product],
                    "event_time": _millis(start + timedelta(seconds=self.rng.random() * span)),
                }
            )
        out.lines = _lines(out.events, self.rng)
        out.lines += [self.rng.choice(out.lines) for _ in range(int(count * retry_fraction))]
        for i in range(malformed):
            out.lines.append(self.MALFORMED[i % len(self.MALFORMED)])
            out.malformed += 1
        self.rng.shuffle(out.lines)
        return out


class ItemEventGenerator:
    """Marketplace item views and orders over restaurants in a few cities, and a catalog in
    which some items are unavailable or deleted."""

    CITIES = ("sf", "nyc", "ber", "sto")
    MALFORMED = (
        "[]",
        json.dumps({"event_id": "y1", "item_id": "i", "restaurant_id": "r", "city_id": "c",
                    "type": "like", "user_id": "u", "event_time": "2026-12-04T10:00:00Z"}),
        json.dumps({"event_id": "y2", "item_id": "i", "restaurant_id": "r", "city_id": "c",
                    "type": "view", "event_time": "2026-12-04T10:00:00Z"}),
    )  # fmt: skip

    def __init__(self, seed: int = 8, restaurants: int = 12, items_each: int = 8,
                 users: int = 400) -> None:  # fmt: skip
        self.rng = random.Random(seed)
        self.items: list[tuple[str, str, str]] = []  # (item_id, restaurant_id, city_id)
        for r in range(restaurants):
            city = self.CITIES[r % len(self.CITIES)]
            for i in range(items_each):
                self.items.append((f"r{r:02d}-item-{i}", f"r{r:02d}", city))
        self.item_weights = _zipf(len(self.items))
        self.users = users
        self._sequence = 0
        self._tag = f"{seed:x}"  # generators with other seeds make other event ids

    def catalog(self) -> list[dict]:
        """A catalog row per item: about one in six unavailable, one in twelve deleted, one
        in eight featured by its restaurant."""
        rows = []
        for n, (item_id, restaurant, _city) in enumerate(self.items):
            rows.append(
                {
                    "item_id": item_id,
                    "name": f"Dish {n} of {restaurant}",
                    "price_cents": 500 + 100 * (n % 20),
                    "restaurant_id": restaurant,
                    "photo_url": f"https://img.example.com/items/{item_id}.jpg",
                    "available": n % 6 != 1,
                    "deleted": n % 12 == 5,
                    "featured": n % 8 == 3,
                }
            )
        return rows

    def events(self, count: int, start: datetime, end: datetime, *, malformed: int = 0) -> Events:
        """Views (4 in 5) and orders; a view is often repeated by its user minutes later."""
        out = Events()
        span = (end - start).total_seconds()
        for _ in range(count):
            self._sequence += 1
            item_id, restaurant, city = self.rng.choices(self.items, cum_weights=self.item_weights)[
                0
            ]
            moment = _millis(start + timedelta(seconds=self.rng.random() * span))
            event = {
                "event_id": f"item-evt-{self._tag}-{self._sequence:07d}",
                "item_id": item_id,
                "restaurant_id": restaurant,
                "city_id": city,
                "type": "view" if self.rng.random() < 0.8 else "order",
                "user_id": f"user-{self.rng.randrange(self.users):04d}",
                "event_time": moment,
            }
            out.events.append(event)
            if event["type"] == "view" and self.rng.random() < 0.3:  # looked again
                self._sequence += 1
                again = _millis(min(moment + timedelta(minutes=self.rng.uniform(0, 12)), end))
                out.events.append(
                    {
                        **event,
                        "event_id": f"item-evt-{self._tag}-{self._sequence:07d}",
                        "event_time": again,
                    }
                )
        out.lines = _lines(out.events, self.rng)
        out.lines += [self.rng.choice(out.lines) for _ in range(count // 20)]  # redelivered
        for i in range(malformed):
            out.lines.append(self.MALFORMED[i % len(self.MALFORMED)])
            out.malformed += 1
        self.rng.shuffle(out.lines)
        return out


def demo_board_streams(seed: int = 21) -> Iterator[dict[str, list[str]]]:
    """Endless one-second batches for `toplist run`, per board: playback reports of users
    starting and stopping songs (a round of them every 30 s: each of the 50 users plays one
    to four songs a round, about 4 playbacks a second in all), flash-sale orders, and item
    views and orders."""
    playbacks = PlaybackGenerator(seed=seed, users=50)
    orders = OrderGenerator(seed=seed + 1)
    items = ItemEventGenerator(seed=seed + 2)
    for second in itertools.count():
        now = datetime.now(UTC)
        batch = {
            "sale": orders.orders(20, now - timedelta(seconds=1), now).lines,
            "popular": items.events(30, now - timedelta(seconds=5), now).lines,
        }
        if second % 30 == 0:
            batch["listeners"] = playbacks.history(now - timedelta(seconds=30), now).lines
        yield batch
