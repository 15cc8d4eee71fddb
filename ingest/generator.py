"""Demo listen events: skewed song popularity, 50+ countries, retries, late events, bad lines.

Deterministic for a given seed, so tests can generate a stream and know its truth.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import accumulate

# 60 ISO 3166-1 alpha-2 codes with rough, made-up weights (bigger markets listen more).
# fmt: off
COUNTRIES: dict[str, int] = {
    "US": 40, "BR": 18, "GB": 14, "DE": 14, "MX": 12, "FR": 11, "IN": 11, "JP": 10, "ES": 9,
    "IT": 8, "CA": 8, "ID": 8, "PH": 7, "AU": 6, "NL": 6, "SE": 6, "PL": 6, "TR": 5, "AR": 5,
    "CO": 5, "KR": 5, "CL": 4, "NO": 4, "DK": 4, "FI": 3, "BE": 3, "AT": 3, "CH": 3, "PT": 3,
    "IE": 3, "NZ": 2, "ZA": 3, "NG": 3, "EG": 2, "SA": 2, "AE": 2, "IL": 2, "TH": 3, "VN": 3,
    "MY": 2, "SG": 2, "TW": 2, "HK": 2, "PE": 2, "EC": 1, "UY": 1, "CZ": 2, "HU": 2, "RO": 2,
    "GR": 2, "UA": 2, "KE": 1, "MA": 1, "PK": 2, "BD": 1, "LK": 1, "IS": 1, "EE": 1, "LV": 1,
    "LT": 1,
}
# fmt: on

_VALID = {
    "event_id": "e",
    "song_id": "s1",
    "user_id": "u1",
    "country": "SE",
    "event_time": 1764600000000,
}
_MISSING = object()


def _bad(**fields: object) -> str:
    """A listen that breaks one rule: the valid example with `fields` changed or removed."""
    event = {**_VALID, **fields}
    return json.dumps({key: value for key, value in event.items() if value is not _MISSING})


MALFORMED_LINES: tuple[str, ...] = (
    "this is not json",
    '{"event_id": "truncated", "song_id": ',
    "[1, 2, 3]",
    _bad(event_id=_MISSING),
    _bad(event_id=""),
    _bad(event_id=42),
    _bad(event_id="x" * 129),
    _bad(event_id="bad-country", country="se"),
    _bad(event_id="bad-country-2", country="SWE"),
    _bad(event_id="no-offset", event_time="2026-12-01T10:00:00"),
    _bad(event_id="bad-hour", event_time="2026-12-01T25:00:00Z"),
    _bad(event_id="float-time", event_time=1764600000000.5),
    _bad(event_id="epoch-seconds", event_time=1764600000),
    _bad(event_id="leap-second", event_time="2016-12-31T23:59:60Z"),
    _bad(event_id="no-song", song_id=_MISSING),
    _bad(event_id="no-user", user_id=_MISSING),
)


@dataclass(frozen=True)
class Listen:
    event_id: str
    song_id: str
    user_id: str
    country: str
    event_time: datetime  # aware, UTC

    def to_json(self, epoch_millis: bool = False) -> str:
        if epoch_millis:
            when: str | int = int(self.event_time.timestamp() * 1000)
        else:
            when = self.event_time.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return json.dumps(
            {
                "event_id": self.event_id,
                "song_id": self.song_id,
                "user_id": self.user_id,
                "country": self.country,
                "event_time": when,
            },
            ensure_ascii=False,
        )


@dataclass
class Batch:
    """Lines to load, and the truth about them."""

    lines: list[str] = field(default_factory=list)
    listens: list[Listen] = field(default_factory=list)  # each new valid event once
    duplicates: int = 0
    malformed: int = 0


class ListenGenerator:
    """Makes listen events between `start` and `end` with Zipf-like song popularity."""

    def __init__(
        self,
        seed: int = 7,
        songs: int = 500,
        users: int = 5_000,
        countries: dict[str, int] | None = None,
    ) -> None:
        self.rng = random.Random(seed)
        self.song_ids = [f"song-{i:05d}" for i in range(songs)]
        # Zipf-like skew: song i is chosen with weight 1 / (i + 1). Cumulative weights are
        # summed once here; random.choices would otherwise sum them again for every event.
        self.song_cum_weights = list(accumulate(1.0 / (i + 1) for i in range(songs)))
        self.users = users
        countries = countries or COUNTRIES
        self.countries = list(countries)
        self.country_cum_weights = list(accumulate(countries.values()))
        self._sequence = 0

    def listen(self, start: datetime, end: datetime) -> Listen:
        self._sequence += 1
        span = (end - start).total_seconds()
        offset = timedelta(milliseconds=int(self.rng.random() * span * 1000))
        return Listen(
            event_id=f"evt-{self.rng.getrandbits(48):012x}-{self._sequence}",
            song_id=self.rng.choices(self.song_ids, cum_weights=self.song_cum_weights)[0],
            user_id=f"user-{self.rng.randrange(self.users)}",
            country=self.rng.choices(self.countries, cum_weights=self.country_cum_weights)[0],
            event_time=start + offset,
        )

    def batch(
        self,
        count: int,
        start: datetime,
        end: datetime,
        *,
        retry_fraction: float = 0.05,
        malformed: int = 0,
        retry_from: list[Listen] | None = None,
    ) -> Batch:
        """`count` new events, plus retries (same event_id, the same message again), plus
        `malformed` bad lines, shuffled. Retries repeat events of this batch and of
        `retry_from` (an earlier batch), so duplicates cross batch boundaries too."""
        batch = Batch()
        for _ in range(count):
            listen = self.listen(start, end)
            batch.listens.append(listen)
            batch.lines.append(listen.to_json(epoch_millis=self.rng.random() < 0.3))
        pool = batch.listens + list(retry_from or [])
        for _ in range(int(count * retry_fraction)):
            again = self.rng.choice(pool)
            batch.lines.append(again.to_json(epoch_millis=self.rng.random() < 0.5))
            batch.duplicates += 1
        for i in range(malformed):
            batch.lines.append(MALFORMED_LINES[i % len(MALFORMED_LINES)])
            batch.malformed += 1
        self.rng.shuffle(batch.lines)
        return batch


def demo_stream(
    seed: int = 11, per_second: int = 500, now: datetime | None = None
) -> Iterator[list[str]]:
    """Endless one-second batches for `toplist run`: mostly fresh listens, some up to a week
    old (late arrivals), a few retries and a rare malformed line."""
    generator = ListenGenerator(seed=seed)
    previous: list[Listen] = []
    while True:
        current = now or datetime.now(UTC)
        fresh = generator.batch(
            per_second, current - timedelta(minutes=20), current, retry_from=previous
        )
        late = generator.batch(max(1, per_second // 5), current - timedelta(days=7), current)
        previous = fresh.listens[-50:]
        lines = fresh.lines + late.lines
        if generator.rng.random() < 0.2:
            lines.append(generator.rng.choice(MALFORMED_LINES))
        yield lines
