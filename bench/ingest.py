"""Ingest: the Kafka path and `toplist load`, beside an in-engine INSERT ... SELECT.

Usage: python -m bench.ingest [--events N] [--partitions P] [--runs R] [--brokers HOST:PORT]

The events (demo listens with 5% retries) are made once and produced beforehand to a topic
with P partitions. Each run then measures, each in a fresh child process on a fresh data
directory (so each figure has its own peak memory):
  kafka          the embedded consumer (ingest/consumer.py) from the topic's first offset until
                 every message is applied, through the SQL validation into raw and aggregates
  load           `toplist load`'s code path (ingest.load.load_lines) on the same lines
  insert-select  the chain alone: the same lines already in the engine (listens_incoming_log),
                 applied by the same INSERT ... SELECT into the same incoming table
  jsoneachrow    the engine's own floor: the same lines read from a file as JSONEachRow into
                 one plain MergeTree table of the listen fields (no validation, no dedup, no
                 aggregates; bad lines skipped), the figure the chain is held against
  load:<board>   `toplist load`'s code path on as many demo events of each other board
                 (listeners, sale, popular: ingest/board_events.py, with their repeats)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.common import (
    arguments,
    bench_config,
    create_topics,
    median,
    own_peak_rss,
    run_child,
    say,
    scratch,
    table,
)

BOARD_MODES = ("load:listeners", "load:sale", "load:popular")
MODES = ("kafka", "load", "insert-select", "jsoneachrow", *BOARD_MODES)
PLAIN_SHAPE = (
    "event_id String, song_id String, user_id String, country String,"
    " event_time DateTime64(3, 'UTC')"
)
# The modes that run Toplist's chain, whose raw tables must agree.
CHAIN_MODES = ("kafka", "load", "insert-select")


def _counts(client, db: str) -> dict[str, int]:
    return {
        "raw_rows": int(client.command(f"SELECT count() FROM {db}.listens")),
        "aggregate_listens": int(
            client.command(f"SELECT sumMerge(listens) FROM {db}.listens_by_10m")
        ),
        "dead_letters": int(client.command(f"SELECT count() FROM {db}.listens_dead_letters")),
    }


def child(mode: str, lines_file: Path, brokers: str, topic: str) -> dict:
    """One measurement in this process; returns what the parent prints."""
    from ingest.load import _apply, load_lines, read_lines
    from toplist.boards import BOARDS, CHARTS
    from toplist.engine import connect
    from toplist.migrate import migrate

    config = bench_config(scratch(mode))
    client = connect(config)
    migrate(client, config)
    db = config.database
    with lines_file.open("rb") as stream:
        messages = sum(1 for _ in stream)
    if mode in BOARD_MODES:  # another board's events, read as `toplist load` reads a file
        board = BOARDS[mode.removeprefix("load:")]
        started = time.perf_counter()
        with lines_file.open("rb") as stream:
            load_lines(
                client, db, read_lines(stream), batch_rows=config.load_batch_rows, board=board
            )
        seconds = time.perf_counter() - started
        raw_rows = int(client.command(f"SELECT count() FROM {db}.{board.raw}"))
        client.close()
        return {"mode": mode, "seconds": seconds, "messages": messages, "raw_rows": raw_rows}
    if mode == "jsoneachrow":
        client.command(
            f"""
            CREATE TABLE {db}.plain (event_id String, song_id String, user_id String,
                country LowCardinality(String), event_time DateTime64(3, 'UTC'))
            ENGINE = MergeTree ORDER BY tuple()
            """
        )
        started = time.perf_counter()
        client.command(
            f"""
            INSERT INTO {db}.plain
            SELECT * FROM file({{path:String}}, JSONEachRow, {{shape:String}})
            SETTINGS input_format_allow_errors_ratio = 1, input_format_allow_errors_num = 0,
                date_time_input_format = 'best_effort'
            """,
            parameters={"path": str(lines_file), "shape": PLAIN_SHAPE},
        )
        seconds = time.perf_counter() - started
        raw_rows = int(client.command(f"SELECT count() FROM {db}.plain"))
        client.close()
        return {"mode": mode, "seconds": seconds, "messages": messages, "raw_rows": raw_rows}
    if mode == "load":
        # As `toplist load` reads a file: line by line, never all of it at once.
        started = time.perf_counter()
        with lines_file.open("rb") as stream:
            load_lines(client, db, read_lines(stream), batch_rows=config.load_batch_rows)
        seconds = time.perf_counter() - started
    elif mode == "insert-select":
        lines = lines_file.read_bytes().splitlines()
        batch_id = uuid.uuid4()
        client.insert(
            f"{db}.listens_incoming_log",
            [lines, ["bench"] * len(lines), [batch_id] * len(lines)],
            column_names=["raw_message", "_source", "_batch_id"],
            column_oriented=True,
        )
        started = time.perf_counter()
        _apply(client, db, batch_id, CHARTS)
        seconds = time.perf_counter() - started
    else:
        from ingest.consumer import KafkaIngest

        config = replace(
            config, kafka_brokers=brokers, kafka_topic=topic, kafka_group=f"b-{uuid.uuid4().hex}"
        )
        started = time.perf_counter()
        ingest = KafkaIngest(config, connect).start()
        first_at, first_messages = None, 0
        while ingest.status.messages < messages:
            time.sleep(0.02)
            if first_at is None and ingest.status.messages:
                first_at, first_messages = time.perf_counter(), ingest.status.messages
            if ingest.status.last_error and not ingest.status.running:
                raise RuntimeError(ingest.status.last_error)
        done = time.perf_counter()
        ingest.stop()
        # Sustained rate: from the first applied batch (after the group join) to the last; a
        # topic small enough for one batch has only the whole time, group join included.
        if first_messages < messages:
            seconds = (done - first_at) * messages / (messages - first_messages)
        else:
            seconds = done - started
    counts = _counts(client, db)
    client.close()
    return {"mode": mode, "seconds": seconds, "messages": messages, **counts}


def produce(brokers: str, topic: str, partitions: int, lines: list[bytes]) -> float:
    from bench.kafka_clients import produce_confluent

    create_topics(brokers, [topic], partitions)
    return produce_confluent(brokers, topic, lines)


def run(events: int, partitions: int, runs: int, brokers: str) -> dict:
    from bench.boards import board_events
    from ingest.generator import ListenGenerator

    work = scratch("ingest")
    say(f"ingest: making {events:,} events (5% retries) ...")
    now = datetime.now(UTC)
    generator = ListenGenerator(seed=3, songs=5_000, users=200_000)
    lines = [line.encode() for line in generator.batch(events, now - timedelta(days=2), now).lines]
    lines_file = work / "events.jsonl"
    lines_file.write_bytes(b"\n".join(lines) + b"\n")
    topic = f"bench-ingest-{uuid.uuid4().hex[:8]}"
    rate = produce(brokers, topic, partitions, lines)
    say(
        f"ingest: produced {len(lines):,} messages to {topic} ({partitions} partitions,"
        f" {rate:,.0f}/s)"
    )
    files, makers = {}, board_events(events, now)
    for mode in BOARD_MODES:
        board = mode.removeprefix("load:")
        say(f"ingest: making {events:,} {board} events ...")
        files[mode] = work / f"{board}.jsonl"
        files[mode].write_text("\n".join(makers[board]().lines) + "\n")
    samples: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for n in range(runs):
        for mode in MODES:
            result, peak = run_child(
                "bench.ingest",
                "--child",
                mode,
                "--lines",
                str(files.get(mode, lines_file)),
                "--brokers",
                brokers,
                "--topic",
                topic,
            )
            result["peak_rss_mib"] = peak / 2**20
            result["events_per_second"] = result["messages"] / result["seconds"]
            samples[mode].append(result)
            say(
                f"ingest run {n + 1}/{runs}: {mode:<14}{result['events_per_second']:>12,.0f}"
                f" events/s  peak {result['peak_rss_mib']:,.0f} MiB"
                f"  raw {result['raw_rows']:,}"
            )
    summary = {
        mode: {
            "events_per_second": median([s["events_per_second"] for s in samples[mode]]),
            "peak_rss_mib": median([s["peak_rss_mib"] for s in samples[mode]]),
            "raw_rows": samples[mode][-1]["raw_rows"],
        }
        for mode in MODES
    }
    floor = summary["jsoneachrow"]["events_per_second"]
    for mode in MODES:  # the other boards' lines are others: held against the listens' floor
        summary[mode]["ratio_to_jsoneachrow"] = summary[mode]["events_per_second"] / floor
    same = len({summary[mode]["raw_rows"] for mode in CHAIN_MODES}) == 1
    return {
        "messages": len(lines),
        "partitions": partitions,
        "runs": runs,
        "summary": summary,
        "same_raw_rows_in_every_mode": same,
        "samples": samples,
    }


def render(report: dict) -> str:
    rows = [
        [mode, s["events_per_second"], s["ratio_to_jsoneachrow"], s["peak_rss_mib"], s["raw_rows"]]
        for mode, s in report["summary"].items()
    ]
    return table(
        f"Ingest: {report['messages']:,} messages, {report['partitions']} partitions,"
        f" median of {report['runs']} runs (targets: load >= 200,000/s, kafka >= 150,000/s,"
        " peak RSS <= 1 GiB); raw rows the same in every chain mode:"
        f" {'yes' if report['same_raw_rows_in_every_mode'] else 'NO'}",
        ["path", "events/s", "x jsoneachrow", "peak RSS MiB", "raw rows"],
        rows,
    )


def main(argv: list[str] | None = None) -> int:
    parser = arguments("python -m bench.ingest", __doc__)
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--brokers", help="an existing broker (default: start one)")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--lines", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        result = child(args.child, args.lines, args.brokers, args.topic)
        print(json.dumps({**result, "peak_rss_bytes": own_peak_rss()}))
        return 0
    from bench.common import with_broker

    with with_broker(args.brokers) as brokers:
        report = run(args.events, args.partitions, args.runs, brokers)
    print(render(report))
    return 0 if report["same_raw_rows_in_every_mode"] else 1


if __name__ == "__main__":
    sys.exit(main())
