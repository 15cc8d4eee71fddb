"""Publication: a full snapshot beside the correct naive query over the raw events.

Usage: python -m bench.publication [--sizes 1M,10M,50M] [--sweep-at 1M] [--runs R]

Events are generated in the engine (INSERT ... SELECT from numbers()) straight into the raw
table `listens`, so its materialized views fill the bucket aggregates exactly as ingest does;
they spread over the 30 days before as_of, across 20 countries, with Zipf-like song
popularity. Sizes are cumulative: one engine grows from the smallest size to the largest.

whole     publish.publisher.publish: the dbt models over the aggregates (every country and
          global x 5 windows, top 1000 kept, policy v1) into board_entries and the registry,
          the window sums built whole (the first publication, or the first after a rebuild)
moved     the same a bucket later, after a bucket's share of new events and a tenth as many
          late ones arrived: the window sums kept since the last publication moved to the new
          as_of (publish/plan.py "Moving"), as the scheduler publishes
naive     one query over the raw events: FINAL (dedup by event_id), minus voids and events
          beyond the horizon, GROUP BY scope (country and global) and song with one count per
          window, ORDER BY listens DESC, song_id, LIMIT 1000 BY window and scope

Both answers are compared (count and a hash of every (window, scope, song, listens) row), so
the baseline is known to be the same board. Beside the size sweep, at --sweep-at events:
1,000 / 10,000 / 100,000 distinct songs, and a hot song with 30% of all listens.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta

from bench.common import arguments, bench_config, median, say, scratch, side_by_side, table

COUNTRIES = [
    "US",
    "GB",
    "DE",
    "FR",
    "SE",
    "BR",
    "IN",
    "JP",
    "MX",
    "ES",
    "IT",
    "CA",
    "AU",
    "NL",
    "PL",
    "TR",
    "KR",
    "AR",
    "NO",
    "FI",
]
CHUNK = 5_000_000


def _size(text: str) -> int:
    text = text.strip().upper()
    factor = {"K": 1_000, "M": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("KM")) * factor)


def generate(
    client,
    db: str,
    first: int,
    last: int,
    as_of: datetime,
    songs: int,
    hot: bool,
    span_ms: int = 30 * 86_400_000,
):
    """Events number first..last-1 (deterministic: hashes of the number, no random state), in
    the `span_ms` before as_of."""
    countries = "[" + ",".join(f"'{c}'" for c in COUNTRIES) + "]"
    unit = "(cityHash64(number, {salt}) / 18446744073709551616.0)"
    song = f"toUInt32(floor(pow({songs}, {unit.format(salt=1)}))) - 1"
    if hot:
        song = f"if(cityHash64(number, 2) % 10 < 3, 0, {song})"
    # Country weights fall off like the song's: the first countries are the busiest.
    country = f"{countries}[1 + toUInt32(floor(pow(20, {unit.format(salt=3)}))) - 1]"
    for start in range(first, last, CHUNK):
        count = min(CHUNK, last - start)
        client.command(
            f"""
            INSERT INTO {db}.listens
                (event_id, song_id, user_id, country, event_time, _source, _batch_id,
                 _received_at)
            SELECT
                concat('evt-', toString(number)),
                concat('song-', leftPad(toString({song}), 6, '0')),
                concat('user-', toString(cityHash64(number, 4) % 1000000)),
                {country},
                toDateTime64({{as_of:DateTime64(3)}}, 3, 'UTC')
                    - toIntervalMillisecond(1 + cityHash64(number, 5) % {span_ms}),
                'bench', generateUUIDv4(), now64(3)
            FROM numbers({start}, {count})
            """,
            parameters={"as_of": as_of},
        )
        if count > 100_000:
            say(f"  generated {start + count:,} events")


def naive_sql(db: str, keep_top: int) -> str:
    from toplist.config import WINDOW_SECONDS

    windows = {name: length for name, length in WINDOW_SECONDS.items() if length is not None}
    counts = ",\n".join(
        f"countIf(event_time >= as_of - toIntervalSecond({s})) AS n_{n}" for n, s in windows.items()
    )
    names = ", ".join(f"'{n}'" for n in windows) + ", 'all'"
    values = ", ".join(f"n_{n}" for n in windows) + ", n_all"
    return f"""
        WITH toDateTime64({{as_of:DateTime64(3)}}, 3, 'UTC') AS as_of
        SELECT window_name, scope, song_id, listens
        FROM
        (
            SELECT arrayJoin([toString(country), 'global']) AS scope, song_id,
                {counts},
                count() AS n_all
            FROM {db}.listens FINAL
            WHERE event_time < as_of AND NOT beyond_horizon
              AND event_id NOT IN (SELECT event_id FROM {db}.listen_voids)
            GROUP BY scope, song_id
        )
        ARRAY JOIN [{names}] AS window_name, [{values}] AS listens
        WHERE listens > 0
        ORDER BY window_name, scope, listens DESC, song_id
        LIMIT {keep_top} BY window_name, scope
    """


def fingerprint_sql(inner: str) -> str:
    return (
        "SELECT count(), sum(cityHash64(window_name, scope, song_id, toUInt64(listens)))"
        f" FROM ({inner})"
    )


def publish(client, config, as_of: datetime):
    from publish.publisher import publish as publish_board

    return publish_board(client, config, as_of=as_of)


def measure(client, config, as_of: datetime, runs: int) -> dict:
    """Each run builds the window sums whole (what the first publication, and the first after
    a rebuild, does), beside the naive query."""
    db = config.database

    def whole():
        _forget_sums(client, db)
        return publish(client, config, as_of=as_of)

    publish_s, naive_s, snapshot, naive = side_by_side(
        whole, lambda: _naive(client, db, config.keep_top, as_of), runs
    )
    p, n = median(publish_s), median(naive_s)
    return {
        "publish_seconds": p,
        "naive_seconds": n,
        "speedup": n / p,
        "entries": _published(client, db, snapshot)[0],
        "same_board": _published(client, db, snapshot) == naive,
        "aggregate_rows": int(client.command(f"SELECT count() FROM {db}.listens_by_10m")),
        "publish_samples": publish_s,
        "naive_samples": naive_s,
    }


def measure_moved(client, config, as_of, runs, events, songs, hot) -> tuple[dict, datetime]:
    """Each run as the schedule publishes: a bucket later, after a bucket's share of the
    events (10 minutes of 30 days') arrived, and a tenth as many late ones over the week
    before; the sums kept since the last publication are moved, not built whole."""
    db = config.database
    publish(
        client, config, as_of=as_of
    )  # the sums kept at as_of, as the last publication left them
    per_bucket = max(10, events // (30 * 144))
    moved_s, naive_s, same = [], [], True
    have = events
    for _ in range(runs):
        as_of += timedelta(minutes=10)
        generate(client, db, have, have + per_bucket, as_of, songs, hot, span_ms=600_000)
        have += per_bucket
        generate(client, db, have, have + per_bucket // 10, as_of, songs, hot, 7 * 86_400_000)
        have += per_bucket // 10
        started = time.perf_counter()
        snapshot = publish(client, config, as_of=as_of)
        moved_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        naive = _naive(client, db, config.keep_top, as_of)
        naive_s.append(time.perf_counter() - started)
        same = same and _published(client, db, snapshot) == naive
    return {
        "moved_seconds": median(moved_s),
        "moved_naive_seconds": median(naive_s),
        "moved_speedup": median(naive_s) / median(moved_s),
        "moved_same_board": same,
        "moved_samples": moved_s,
        "moved_events_per_run": per_bucket + per_bucket // 10,
    }, as_of


def _forget_sums(client, db: str) -> None:
    """What a rebuild does to the kept sums: the next publication builds them whole."""
    if int(client.command(f"EXISTS TABLE {db}.int_listens__windowed")):
        client.command(f"ALTER TABLE {db}.int_listens__windowed MODIFY COMMENT ''")


def _naive(client, db: str, keep_top: int, as_of: datetime) -> tuple:
    sql = fingerprint_sql(naive_sql(db, keep_top))
    return tuple(client.query(sql, parameters={"as_of": as_of}).result_rows[0])


def _published(client, db: str, snapshot) -> tuple:
    return tuple(
        client.query(
            fingerprint_sql(
                f"SELECT window_name, scope, item_id AS song_id, score AS listens"
                f" FROM {db}.board_entries WHERE board = 'charts'"
                f" AND snapshot_id = '{snapshot.snapshot_id}' AND policy = 'v1'"
            )
        ).result_rows[0]
    )


def scenario(name: str, sizes: list[int], songs: int, hot: bool, runs: int) -> list[dict]:
    from toplist.engine import connect
    from toplist.migrate import migrate

    config = bench_config(scratch("publish"))
    client = connect(config)
    migrate(client, config)
    # Bucket-aligned and in the past (the moved runs go on from it a bucket at a time).
    as_of = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=6)
    as_of -= timedelta(minutes=as_of.minute % 10)
    results, have = [], 0
    for size in sizes:
        say(f"publication [{name}]: {size:,} events, {songs:,} songs{', hot song' if hot else ''}")
        generate(client, config.database, have, size, as_of, songs, hot)
        have = size
        for aggregate in ("listens_by_10m", "listens_total", "listens_by_day"):
            client.command(f"OPTIMIZE TABLE {config.database}.{aggregate} FINAL")
        result = {"scenario": name, "events": size, "songs": songs, "hot_song": hot}
        result.update(measure(client, config, as_of, runs))
        moved, as_of = measure_moved(client, config, as_of, runs, size, songs, hot)
        result.update(moved)
        have = size + runs * moved["moved_events_per_run"]
        say(
            f"  publish whole {result['publish_seconds']:.2f} s · moved a bucket"
            f" {result['moved_seconds']:.2f} s · naive {result['naive_seconds']:.2f} s"
            f" · {result['speedup']:.1f}x / {result['moved_speedup']:.1f}x"
            f" · same board: {result['same_board']} / {result['moved_same_board']}"
        )
        results.append(result)
    client.close()
    return results


def run(sizes: list[int], sweep_at: int, runs: int) -> dict:
    rows = scenario("events", sizes, 10_000, False, runs)
    for songs in (1_000, 100_000):
        rows += scenario("songs", [sweep_at], songs, False, runs)
    rows += scenario("hot song", [sweep_at], 10_000, True, runs)
    return {
        "runs": runs,
        "keep_top": 1000,
        "windows": 5,
        "scopes": len(COUNTRIES) + 1,
        "results": rows,
    }


def render(report: dict) -> str:
    rows = [
        [
            r["scenario"],
            r["events"],
            r["songs"],
            "yes" if r["hot_song"] else "no",
            r["aggregate_rows"],
            r["publish_seconds"],
            r["moved_seconds"],
            r["naive_seconds"],
            r["speedup"],
            r["moved_speedup"],
            "yes" if r["same_board"] and r["moved_same_board"] else "NO",
        ]
        for r in report["results"]
    ]
    return table(
        f"Publication: {report['scopes']} scopes x {report['windows']} windows, top"
        f" {report['keep_top']}, median of {report['runs']} runs"
        " (targets: >= 50x naive at 50M, < 0.5 s at 10M)",
        [
            "scenario",
            "events",
            "songs",
            "hot",
            "aggregate rows",
            "whole s",
            "moved s",
            "naive s",
            "whole ×",
            "moved ×",
            "same board",
        ],
        rows,
    )


def main(argv: list[str] | None = None) -> int:
    parser = arguments("python -m bench.publication", __doc__)
    parser.add_argument("--sizes", default="1M,10M,50M", help="event counts, cumulative")
    parser.add_argument("--sweep-at", default="1M", help="events for the songs and hot sweeps")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    sizes = sorted(_size(s) for s in args.sizes.split(","))
    print(render(run(sizes, _size(args.sweep_at), args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
