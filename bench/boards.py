"""The other boards' publication (live listeners, the flash sale, the marketplace shelves):
can each be republished every few seconds at size?

Usage: python -m bench.boards [--events N[,N...]] [--runs R]

For each size, N events per board are generated (ingest/board_events.py, with their repeats
and awkward cases) and loaded through the same path as Kafka. Then, --runs times each:
* `publish` (dbt over the board's aggregates, then the atomic snapshot write);
* the baseline: the same board computed by one plain query over the raw events, without the
  aggregates, dbt or a snapshot.
Both must give the same board (count and a hash of every row); the figure is the ratio
naive / publish (above 1: publishing beats one naive query) and the publication time against
the board's refresh interval (listeners and sale every 5 s, popular every 10 s).
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta

from bench.common import arguments, bench_config, median, say, scratch, side_by_side, table
from toplist.config import POPULAR_WINDOW_SECONDS


def naive_listeners(db: str, keep: int, as_of: datetime, retention_hours: int) -> str:
    # The retention as the board has it (sql/0019): the reports of as_of's hour and the
    # retention's hours before it; 0 keeps them all.
    at = f"toDateTime('{as_of:%Y-%m-%d %H:%M:%S}', 'UTC')"
    kept = (
        f"WHERE toStartOfHour(event_time) >= toStartOfHour({at}) - INTERVAL {retention_hours} HOUR"
        if retention_hours
        else ""
    )
    return f"""
        WITH per_playback AS (
            SELECT user_id, playback_id,
                max(tuple(if(type = 'HEARTBEAT', toUInt64(0), version), toUInt8(type = 'STOP')))
                    AS state,
                argMaxIf(song_id, tuple(version, event_time, song_id), type = 'START') AS song,
                maxIf(event_time, type = 'START') AS started
            FROM {db}.playback_reports
            {kept}
            GROUP BY user_id, playback_id
        ),
        current AS (
            SELECT user_id, argMax(song, tuple(started, state.1, playback_id)) AS current_song
            FROM per_playback WHERE state.2 = 0 AND song != ''
            GROUP BY user_id
        )
        SELECT 'global' AS scope, 'listeners' AS metric, 'now' AS window_name,
            current_song AS item_id, toInt64(count()) AS score
        FROM current GROUP BY current_song ORDER BY score DESC, item_id LIMIT {keep}
    """


def naive_sale(db: str, keep: int) -> str:
    once = f"(SELECT * FROM {db}.orders LIMIT 1 BY event_id)"
    return f"""
        SELECT * FROM (
            SELECT 'products' AS scope, 'units' AS metric, 'all' AS window_name,
                product_id AS item_id, toInt64(sum(units)) AS score
            FROM {once} GROUP BY product_id ORDER BY score DESC, item_id LIMIT {keep}
        )
        UNION ALL
        SELECT * FROM (
            SELECT 'buyers', 'spend_cents', 'all', buyer_id, toInt64(sum(amount_cents)) AS score
            FROM {once} GROUP BY buyer_id ORDER BY score DESC, buyer_id LIMIT {keep}
        )
    """


def naive_popular(db: str, keep: int, as_of: datetime) -> str:
    # The shelves' as_of and rows are on 10 seconds (sql/0029).
    aligned = as_of.replace(second=as_of.second - as_of.second % 10, microsecond=0)
    at = f"toDateTime('{aligned:%Y-%m-%d %H:%M:%S}', 'UTC')"
    windows = "[" + ", ".join(f"('{n}', {s})" for n, s in POPULAR_WINDOW_SECONDS.items()) + "]"
    longest = max(POPULAR_WINDOW_SECONDS.values())
    return f"""
        SELECT scope, metric, window_name, item_id, toInt64(uniqExact(what)) AS score
        FROM (
            SELECT
                arrayJoin([concat('restaurant:', restaurant_id), concat('city:', city_id),
                    'global']) AS scope,
                if(type = 'view', 'views', 'orders') AS metric,
                arrayJoin(arrayFilter(
                    w -> toStartOfInterval(event_time, INTERVAL 10 SECOND) >= {at} - w.2,
                    {windows})).1 AS window_name,
                item_id,
                if(type = 'view',
                    concat(user_id, '/', toString(toplist_bucket_start(event_time))),
                    event_id) AS what
            FROM {db}.item_events
            WHERE event_time >= {at} - INTERVAL {longest} SECOND AND event_time < {at}
        )
        GROUP BY scope, metric, window_name, item_id
        ORDER BY scope, metric, window_name, score DESC, item_id
        LIMIT {keep} BY scope, metric, window_name
    """


def fingerprint(inner: str) -> str:
    return (
        "SELECT count(), sum(cityHash64(scope, metric, window_name, item_id, toInt128(score)))"
        f" FROM ({inner})"
    )


def board_events(events: int, now: datetime) -> dict:
    """By board, what makes about `events` demo events of it (ingest/board_events.py)."""
    from ingest.board_events import ItemEventGenerator, OrderGenerator, PlaybackGenerator

    made = {
        # about 4 reports per user (1-4 playbacks each, and their STOPs and restarts)
        "listeners": lambda: PlaybackGenerator(seed=1, users=events // 4, songs=2_000).history(
            now - timedelta(minutes=30), now
        ),
        "sale": lambda: OrderGenerator(seed=1, products=5_000, buyers=events // 5).orders(
            events, now - timedelta(hours=2), now
        ),
        "popular": lambda: ItemEventGenerator(
            seed=1, restaurants=500, items_each=20, users=events // 10
        ).events(int(events / 1.24), now - timedelta(days=1, hours=2), now),
    }
    return made


def load_boards(client, config, events: int, now: datetime) -> dict[str, float]:
    from ingest.load import load_lines
    from toplist.boards import BOARDS

    seconds = {}
    for board, make in board_events(events, now).items():
        generated = make()
        started = time.perf_counter()
        load_lines(
            client, config.database, generated.lines, batch_rows=100_000, board=BOARDS[board]
        )
        seconds[board] = time.perf_counter() - started
        say(f"  {board}: {len(generated.lines):,} lines loaded in {seconds[board]:.1f} s")
    return seconds


def measure(events: int, runs: int) -> list[dict]:
    from publish.publisher import publish
    from toplist.engine import connect
    from toplist.migrate import migrate

    config = bench_config(scratch(f"boards-{events}"))
    client = connect(config)
    migrate(client, config)
    say(f"boards at {events:,} events each")
    # Up to the present: live listeners count the reports of the retention's hours before
    # the wall clock's, and the TTL drops older ones (sql/0019), as for live reports.
    now = datetime.now(UTC).replace(microsecond=0)
    load_boards(client, config, events, now)
    db, rows = config.database, []
    naive = {
        "listeners": naive_listeners(
            db, config.board_keep_top, now, config.listeners_retention_hours
        ),
        "sale": naive_sale(db, config.board_keep_top),
        "popular": naive_popular(db, config.popular_keep_top, now),
    }
    for board, sql in naive.items():
        # the first publication parses the dbt project: a warm-up, not counted
        publish_s, naive_s, snapshot, expected = side_by_side(
            lambda board=board: publish(client, config, now, board=board, allow_older=True),
            lambda sql=sql: client.query(fingerprint(sql)).result_rows[0],
            runs,
            warmup=1,
        )
        published = client.query(
            fingerprint(
                f"SELECT scope, metric, window_name, item_id, score FROM {db}.board_entries"
                f" WHERE snapshot_id = '{snapshot.snapshot_id}'"
            )
        ).result_rows[0]
        p, n = median(publish_s), median(naive_s)
        rows.append(
            {
                "events": events,
                "board": board,
                "publish_seconds": p,
                "naive_seconds": n,
                "speedup": n / p,
                "refresh_seconds": config.refresh_seconds(board),
                "entries": int(published[0]),
                "same_board": tuple(published) == tuple(expected),
            }
        )
        say(f"  {board}: publish {p:.2f} s, naive {n:.2f} s, same board: {rows[-1]['same_board']}")
    client.close()
    return rows


def render(rows: list[dict]) -> str:
    return table(
        "the other boards' publication (median of runs; the first, which parses dbt, left out)",
        ["events", "board", "publish", "naive", "naive / publish", "refresh", "entries", "same"],
        [
            [
                f"{r['events']:,}",
                r["board"],
                f"{r['publish_seconds']:.2f} s",
                f"{r['naive_seconds']:.2f} s",
                f"{r['speedup']:.2f}x",
                f"{r['refresh_seconds']:g} s",
                r["entries"],
                "yes" if r["same_board"] else "NO",
            ]
            for r in rows
        ],
    )


def main(argv: list[str] | None = None) -> int:
    parser = arguments("python -m bench.boards", __doc__)
    parser.add_argument("--events", default="100000,1000000", help="sizes, comma-separated")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    rows = []
    for events in [int(n) for n in args.events.split(",")]:
        rows += measure(events, args.runs)
    print(render(rows))
    return 0 if all(r["same_board"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
