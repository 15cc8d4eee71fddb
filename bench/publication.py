"""Publication: a full snapshot beside the correct naive query over the raw events.

Usage: python -m bench.publication [--sizes 1M,10M,50M] [--sweep-at 1M] [--runs R]

Events are generated in the engine (INSERT ... SELECT from numbers()) straight into the raw
table `listens`, so its materialized views fill the bucket aggregates exactly as ingest does;
they spread over the 30 days before as_of, across 20 countries, with Zipf-like song
popularity. Sizes are cumulative: one engine grows from the smallest size to the largest.

publish   publish.publisher.publish: the dbt models over the aggregates (every country and
          global x 5 windows, top 1000 kept, policy v1) into board_entries and the registry
naive     one query over the raw events: FINAL (dedup by event_id), minus voids and events
          beyond the horizon, GROUP BY scope (country and global) and song with one count per
          window, ORDER BY listens DESC, song_id, LIMIT 1000 BY window and scope

in a row  (the size sweep only) publications one after another, each a bucket after the one
          before as the scheduler publishes them (each entry's movement found against the
          publications before it), once the board keeps its retention of snapshots
          (TOPLIST_SNAPSHOT_RETENTION, 24): three quarters of it, each quarter ending with
          the prune of the oldest quarter; the mean, what a board published on a schedule
          costs (the scheduler prunes in a job of its own, on the same cores)

Both answers are compared (count and a hash of every (window, scope, song, listens) row), so
the baseline is known to be the same board. Beside the size sweep, at --sweep-at events:
1,000 / 10,000 / 100,000 distinct songs, and a hot song with 30% of all listens.
"""

from __future__ import annotations

import itertools
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


def generate(client, db: str, first: int, last: int, as_of: datetime, songs: int, hot: bool):
    """Events number first..last-1 (deterministic: hashes of the number, no random state)."""
    countries = "[" + ",".join(f"'{c}'" for c in COUNTRIES) + "]"
    unit = "(cityHash64(number, {salt}) / 18446744073709551616.0)"
    song = f"toUInt32(floor(pow({songs}, {unit.format(salt=1)}))) - 1"
    if hot:
        song = f"if(cityHash64(number, 2) % 10 < 3, 0, {song})"
    # Country weights fall off like the song's: the first countries are the busiest.
    country = f"{countries}[1 + toUInt32(floor(pow(20, {unit.format(salt=3)}))) - 1]"
    span_ms = 30 * 86_400_000
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


def measure(client, config, as_of: datetime, runs: int, steady: bool) -> dict:
    from publish.publisher import publish

    db = config.database
    publish_s, naive_s, snapshot, naive = side_by_side(
        lambda: publish(client, config, as_of=as_of),
        lambda: client.query(
            fingerprint_sql(naive_sql(db, config.keep_top)), parameters={"as_of": as_of}
        ).result_rows[0],
        runs,
    )
    published = client.query(
        fingerprint_sql(
            f"SELECT window_name, scope, item_id AS song_id, score AS listens"
            f" FROM {db}.board_entries WHERE board = 'charts'"
            f" AND snapshot_id = '{snapshot.snapshot_id}' AND policy = 'v1'"
        )
    ).result_rows[0]
    aggregate_rows = int(client.command(f"SELECT count() FROM {db}.listens_by_10m"))
    p, n = median(publish_s), median(naive_s)
    return {
        "in_a_row_seconds": in_a_row(client, config, as_of) if steady else None,
        "publish_seconds": p,
        "naive_seconds": n,
        "speedup": n / p,
        "entries": int(published[0]),
        "same_board": tuple(published) == tuple(naive),
        "aggregate_rows": aggregate_rows,
        "publish_samples": publish_s,
        "naive_samples": naive_s,
    }


def in_a_row(client, config, as_of: datetime) -> float:
    """The mean seconds of a publication among three quarters of the retention published one
    after another, each a bucket (10 minutes) after the one before, as the scheduler publishes
    the charts (so each entry's movement is found against the publications before it), each
    quarter's last one pruning the oldest quarter (publish prunes after it publishes), once
    the board keeps its retention."""
    from publish.publisher import publish

    kept = int(
        client.command(
            f"SELECT count() FROM {config.database}.board_snapshots WHERE board = 'charts'"
        )
    )
    quarter = max(1, config.snapshot_retention // 4)
    moments = (as_of + timedelta(minutes=10 * step) for step in itertools.count(1))
    for _ in range(max(0, config.snapshot_retention - kept)):
        publish(client, config, as_of=next(moments))
    started = time.perf_counter()
    for _ in range(3 * quarter):
        publish(client, config, as_of=next(moments))
    seconds = (time.perf_counter() - started) / (3 * quarter)
    # the next size publishes at as_of again, which these later snapshots would refuse
    for published in ("board_snapshots", "board_entries"):
        client.command(f"TRUNCATE TABLE {config.database}.{published}")
    return seconds


def scenario(name: str, sizes: list[int], songs: int, hot: bool, runs: int) -> list[dict]:
    from toplist.boards import CHARTS
    from toplist.engine import connect
    from toplist.migrate import migrate

    config = bench_config(scratch("publish"))
    client = connect(config)
    migrate(client, config)
    # Bucket-aligned and in the past, so every run of a scenario ranks the same data; far
    # enough back for the publications in a row to move on a bucket each (`in_a_row`).
    as_of = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=8)
    as_of -= timedelta(minutes=as_of.minute % 10)
    results, have = [], 0
    for size in sizes:
        say(f"publication [{name}]: {size:,} events, {songs:,} songs{', hot song' if hot else ''}")
        generate(client, config.database, have, size, as_of, songs, hot)
        have = size
        for aggregate, _ in CHARTS.aggregates:
            client.command(f"OPTIMIZE TABLE {config.database}.{aggregate} FINAL")
        result = {"scenario": name, "events": size, "songs": songs, "hot_song": hot}
        result.update(measure(client, config, as_of, runs, steady=name == "events"))
        say(
            f"  publish {result['publish_seconds']:.2f} s"
            + (f" ({result['in_a_row_seconds']:.2f} s in a row)" if name == "events" else "")
            + f" · naive {result['naive_seconds']:.2f} s"
            f" · {result['speedup']:.1f}x · same board: {result['same_board']}"
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
            "-" if r["in_a_row_seconds"] is None else r["in_a_row_seconds"],
            r["naive_seconds"],
            r["speedup"],
            "yes" if r["same_board"] else "NO",
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
            "publish s",
            "in a row s",
            "naive s",
            "speedup",
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
