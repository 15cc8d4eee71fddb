"""The `toplist` command. Each subcommand opens the engine, does its work and closes it."""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from toplist.boards import BOARDS, CHARTS, VOIDABLE
from toplist.config import Config, ConfigError
from toplist.engine import connect, session
from toplist.snapshots import parse_time

log = logging.getLogger("toplist")


def _time(value: str) -> datetime:
    """An RFC 3339 time (a missing offset means UTC) or epoch milliseconds."""
    try:
        if value.isdigit():
            return datetime.fromtimestamp(int(value) / 1000, UTC)
        return parse_time(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {value!r} (use e.g. 2026-12-02T17:50:00Z)"
        ) from None


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cmd_migrate(args: argparse.Namespace, config: Config) -> int:
    from toplist.migrate import dump_schema, migrate, render_text

    if args.cluster is not None and not args.render:
        raise ConfigError(
            "--cluster goes with --render (a live cluster: TOPLIST_CLICKHOUSE_CLUSTER)"
        )
    if args.render:
        if args.cluster is not None:
            # Only the layout matters for rendering; the engine is never reached.
            url = config.clickhouse_url if not config.embedded else "http://localhost:8123"
            config = replace(config, clickhouse_url=url, clickhouse_cluster=args.cluster)
        sys.stdout.write(render_text(config))
        return 0
    with session(config) as client:
        ran = migrate(client, config)
        if ran:
            for migration in ran:
                _say(f"applied {migration.path.name}")
        else:
            _say(f"{config.database}: schema is up to date")
        if args.dump_schema:
            Path(args.dump_schema).write_text(dump_schema(client, config.database))
            _say(f"wrote the schema to {args.dump_schema}")
    return 0


def cmd_load(args: argparse.Namespace, config: Config) -> int:
    from ingest.load import load_lines, read_lines, repair_configured
    from toplist.migrate import migrate

    stream = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")  # noqa: SIM115
    way_in = BOARDS[args.board]
    started = time.monotonic()

    def progress(read: int) -> None:
        rate = read / max(time.monotonic() - started, 1e-9)
        _say(f"  {read:,} lines sent ({rate:,.0f}/s)")

    with stream, session(config) as client:
        migrate(client, config)
        repair_configured(client, config, way_in)
        result = load_lines(
            client,
            config.database,
            read_lines(stream),
            batch_rows=config.load_batch_rows,
            progress=progress,
            board=way_in,
        )
    if way_in.exactly_once:
        counts = f"accepted {result.accepted:,} · duplicates {result.duplicates:,}"
        if result.conflicts:
            counts += f" ({result.conflicts:,} with other content than the copy that counted)"
    else:  # repeats are valid rows; the board's aggregates count each event once
        counts = f"valid {result.accepted:,} (a repeated {way_in.what} counts once)"
    print(
        f"read {result.read:,} · {counts} · rejected {result.rejected:,}"
        + (f" (see {config.database}.{way_in.dead_letters})" if result.rejected else "")
        + (f" · blank {result.blank:,} (skipped)" if result.blank else "")
    )
    return 0


def cmd_catalog(args: argparse.Namespace, config: Config) -> int:
    from ingest.catalog import load_catalog
    from toplist.migrate import migrate

    text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    with session(config) as client:
        migrate(client, config)
        result = load_catalog(client, config.database, text.splitlines())
    for number, reason in result.rejected:
        _say(f"  line {number}: {reason}")
    print(f"loaded {result.loaded:,} catalog items · rejected {len(result.rejected):,} lines")
    return 1 if result.rejected else 0


def cmd_publish(args: argparse.Namespace, config: Config) -> int:
    from publish.publisher import publish
    from toplist.migrate import migrate

    with session(config) as client:
        migrate(client, config)
        snapshot = publish(
            client, config, args.as_of, board=args.board, allow_older=args.allow_older
        )
    print(json.dumps(snapshot.as_dict()))
    return 0


def cmd_void(args: argparse.Namespace, config: Config) -> int:
    from publish.publisher import publish
    from toplist.corrections import read_event_ids, void_events
    from toplist.migrate import migrate

    text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    ids = read_event_ids(text.splitlines())
    with session(config) as client:
        migrate(client, config)
        result = void_events(client, config.database, ids, args.reason, board=args.board)
        print(
            f"{result.requested:,} ids · voided {result.voided:,} · already voided"
            f" {result.already_voided:,} · not found {result.not_found:,}"
        )
        if args.publish:
            snapshot = publish(client, config, board=args.board)
            print(
                f"published corrected snapshot {snapshot.snapshot_id}"
                f" ({snapshot.void_count:,} voided events excluded)"
            )
    return 0


def cmd_rebuild(args: argparse.Namespace, config: Config) -> int:
    from toplist.corrections import rebuild_aggregates, rebuild_board
    from toplist.migrate import migrate

    started = time.monotonic()
    if config.clickhouse_cluster:
        raise ConfigError(
            "toplist rebuild is not built for a cluster yet: its fresh tables and EXCHANGE would"
            " need their own Keeper paths on every node (docs/cluster.md)"
        )
    if BOARDS[args.board].idempotent_aggregates:  # rebuilt whole; the charts' sums by month
        if args.start or args.end:
            raise ConfigError(
                f"--from/--to are for the charts; the {args.board} board is rebuilt whole"
            )
        with session(config) as client:
            migrate(client, config)
            rows = rebuild_board(client, config.database, args.board)
        print(
            f"rebuilt the {args.board} aggregate from the raw events ({rows:,} rows) and"
            f" swapped it in, in {time.monotonic() - started:.1f} s"
        )
        return 0

    def progress(done: int, total: int, month: int, rows: int) -> None:
        what = f"recounted, {rows:,} bucket rows" if rows else "kept as it was"
        _say(
            f"  [{done}/{total}] {month // 100}-{month % 100:02d} {what}"
            f" ({time.monotonic() - started:.1f} s)"
        )

    with session(config) as client:
        migrate(client, config)
        _say("rebuilding the bucket aggregates from the raw events into a fresh table")
        result = rebuild_aggregates(
            client, config.database, args.start, args.end, progress, config.raw_ttl_days
        )
    if result.expired:
        months = ", ".join(f"{m // 100}-{m % 100:02d}" for m in result.expired)
        _say(
            f"kept {months} as they were: raw events older than TOPLIST_RAW_TTL_DAYS"
            f" ({config.raw_ttl_days}) may have expired, so a recount would come out short"
        )
    print(
        f"rebuilt {len(result.recounted)} month(s) of aggregates from the raw events"
        f" ({result.rows:,} bucket rows) and swapped them in, in {result.seconds:.1f} s"
    )
    return 0


def cmd_dbt(args: argparse.Namespace, config: Config) -> int:
    from publish import dbt

    dbt_args = list(args.dbt_args)
    if dbt_args and dbt_args[0] == "--":
        dbt_args = dbt_args[1:]
    try:
        dbt.invoke(config, dbt_args or ["--help"])
    except dbt.DbtError as error:
        _say(str(error))
        return 1
    return 0


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM (docker stop, systemd) stops as Ctrl-C does


def _serve(
    config: Config,
    host: str,
    port: int,
    publish_every: float | None,
    banner: str | None = None,
    ingest: bool = False,
    workers: int = 0,
) -> int:
    """The API, with the publisher beside it (`--publish-every`) and every board's embedded
    consumer (`--ingest`): each stage started, then stopped in order. With `workers`, the
    reads are served by that many worker processes (api/workers.py) and this process keeps
    the engine."""
    from api.app import create_app
    from api.server import serve, serve_workers
    from ingest.consumer import start_consumers
    from publish.publisher import sync_snapshot_files
    from publish.scheduler import events_arrived, start_scheduler, stop_scheduler

    if workers:
        with session(config) as client:
            sync_snapshot_files(client, config)
    scheduler = None

    def arrived(board: str) -> None:  # a consumer wrote a batch: the live boards publish now
        if scheduler is not None:
            events_arrived(scheduler, board)

    consumers = start_consumers(config, connect, on_written=arrived) if ingest else {}
    app = create_app(config, consumers=consumers)
    state = app.extensions["toplist"]
    if publish_every:
        every = replace(config, publish_interval_seconds=publish_every)
        scheduler = start_scheduler(every, state.on_publication)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)

    def ready() -> None:
        processes = f" ({workers} worker processes)" if workers else ""
        _say(banner or f"serving the Toplist API on http://{host}:{port}/{processes}")

    try:
        if workers:
            serve_workers(app, config, host, port, workers, ready)
        else:
            serve(app, host, port, ready)
    finally:
        # A clean stop: each consumer writes and commits what it took, the publication under
        # way finishes, then the engine closes.
        _say("stopping ...")
        for running in consumers.values():
            running.stop()
        if scheduler:
            stop_scheduler(scheduler)
        state.close()
    _say("stopped")
    return 0


def _metrics_directory(workers: int) -> None:
    """With worker processes, a fresh directory where every process of the service keeps its
    metrics (prometheus_client's multiprocess mode), set before prometheus_client is first
    imported, which is when it reads it; removed when this process exits."""
    if workers:
        directory = tempfile.mkdtemp(prefix="toplist-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
        atexit.register(shutil.rmtree, directory, ignore_errors=True)


def cmd_serve(args: argparse.Namespace, config: Config) -> int:
    _metrics_directory(args.workers)
    from toplist.migrate import migrate

    with session(config) as client:
        migrate(client, config)
    return _serve(
        config, args.host, args.port, args.publish_every, ingest=args.ingest, workers=args.workers
    )


def cmd_schedule(args: argparse.Namespace, config: Config) -> int:
    """Publish every board on its schedule, serving nothing: server mode's publisher process
    (API processes find each new snapshot by polling the registry)."""
    from publish.scheduler import start_scheduler, stop_scheduler
    from toplist.migrate import migrate

    with session(config) as client:
        migrate(client, config)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    scheduler = start_scheduler(config)
    every = ", ".join(f"{board} every {config.refresh_seconds(board):g} s" for board in BOARDS)
    _say(f"publishing {every}, and on request; Ctrl-C or SIGTERM stops")
    try:
        while not stop.wait(1.0):
            pass
    finally:
        stop_scheduler(scheduler)
    return 0


def cmd_produce(args: argparse.Namespace, config: Config) -> int:
    from ingest.load import read_lines
    from ingest.produce import ProduceResult, produce_lines

    brokers = args.brokers or config.kafka_brokers
    if not brokers:
        raise ConfigError("set TOPLIST_KAFKA_BROKERS or pass --brokers host:port")
    topic = args.topic or config.topic(args.board)
    stream = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")  # noqa: SIM115
    started = time.monotonic()

    def progress(result: ProduceResult) -> None:
        rate = result.sent / max(time.monotonic() - started, 1e-9)
        _say(f"  {result.sent:,} sent · {result.acked:,} acknowledged ({rate:,.0f}/s)")

    key = BOARDS[args.board].key
    _say(f"producing to {topic} at {brokers} (acks=all, idempotent, keyed by {key})")
    with stream:
        lines = read_lines(stream)
        result = produce_lines(brokers, topic, lines, progress=progress, key_field=key)
    print(
        f"sent {result.sent:,} · acknowledged {result.acked:,} · failed {result.failed:,}"
        f" · unsettled {result.unsettled:,} · without {key} (unkeyed) {result.unkeyed:,}"
        + (f" · blank {result.blank:,} (skipped)" if result.blank else "")
    )
    for error in result.errors:
        _say(f"  error: {error}")
    return 0 if result.acked == result.sent else 1


def cmd_run(args: argparse.Namespace, config: Config) -> int:
    _metrics_directory(args.workers)
    from ingest.demo import DemoStream, load_history
    from ingest.load import repair_configured
    from toplist.migrate import migrate

    config = replace(
        config,
        publish_interval_seconds=args.publish_every,
        stale_after_seconds=max(3 * args.publish_every, 30.0),
    )
    client = connect(config)
    migrate(client, config)
    _say(f"engine: {config.clickhouse_url} (database {config.database})")
    repair_configured(client, config)
    load_history(client, config, args.history, say=_say)
    demo = DemoStream(client, config, args.rate).start()
    url = f"http://{args.host}:{args.port}"
    via = f" through Kafka ({config.kafka_brokers})" if demo.kafka else ""
    banner = (
        f"\nToplist is running (embedded). Streaming ~{args.rate} demo events/s{via},"
        f" publishing every {args.publish_every:g} s.\n"
        f"  web page:   {url}/\n"
        f"  a chart:    {url}/v1/charts/global?window=24h&k=10\n"
        f"  listeners:  {url}/v1/listeners?k=5     sale: {url}/v1/sale/products?k=10\n"
        f"  a shelf:    {url}/v1/topk?scope=city:sf&metric=views&window=1h&k=5\n"
        f"  health:     {url}/healthz     metrics: {url}/metrics\n"
        "Press Ctrl-C to stop.\n"
    )
    try:
        return _serve(
            config,
            args.host,
            args.port,
            args.publish_every,
            banner,
            ingest=bool(demo.kafka),
            workers=args.workers,
        )
    finally:
        demo.stop()
        client.close()


def _count(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"not a number of processes (0 or more): {value!r}")
    return int(value)


def _workers_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers",
        type=_count,
        default=os.cpu_count() or 1,
        metavar="N",
        help="API worker processes that serve the reads from the published snapshots while"
        " this process keeps the engine (default: the core count, %(default)s); 0 serves"
        " everything from this process",
    )


def _board_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--board",
        choices=tuple(BOARDS),
        default=CHARTS.name,
        help=f"the board {what}: charts (listen events, the default), listeners (playback"
        " reports), sale (orders) or popular (item events)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toplist",
        description="Near-real-time top-K leaderboards on ClickHouse. Configuration comes from"
        " TOPLIST_* environment variables; TOPLIST_CLICKHOUSE_URL picks the engine (default:"
        " an embedded chDB directory under ./.toplist/).",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="the main job: demo pipeline, publisher, API, web page",
        description="Migrate, load demo history, stream demo events, "
        "publish on a short schedule, and serve the API and web page.",
    )
    run.add_argument("--host", default="127.0.0.1")
    run.add_argument("--port", type=int, default=8080)
    run.add_argument(
        "--publish-every",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="publication interval for the demo (default 15; production 600)",
    )
    run.add_argument("--rate", type=int, default=500, help="demo events per second (default 500)")
    run.add_argument(
        "--history",
        type=int,
        default=50_000,
        help="demo events loaded before streaming starts (default 50000)",
    )
    _workers_argument(run)
    run.set_defaults(handler=cmd_run)

    migrate = commands.add_parser(
        "migrate",
        help="apply sql/ migrations (idempotent)",
        description="Apply the sql/ migrations not yet recorded.",
    )
    migrate.add_argument(
        "--dump-schema",
        metavar="FILE",
        help="also write the resulting schema to FILE (e.g. sql/schema.sql)",
    )
    migrate.add_argument(
        "--render",
        action="store_true",
        help="print every statement a migration of an empty database would run, for this"
        " configuration's layout, and connect to nothing",
    )
    migrate.add_argument(
        "--cluster",
        metavar="NAME",
        help="with --render: render for the ClickHouse cluster NAME (ON CLUSTER, Replicated and"
        " Distributed tables) instead of TOPLIST_CLICKHOUSE_CLUSTER",
    )
    migrate.set_defaults(handler=cmd_migrate)

    load = commands.add_parser(
        "load",
        help="ingest a board's events from a JSON-lines file (listens by default)",
        description="Ingest JSON lines through the same validation, "
        "dedup and dead-letter path as Kafka; print the counts.",
    )
    load.add_argument("file", help="a JSON-lines file, or - for standard input")
    _board_argument(load, "whose events the file holds")
    load.set_defaults(handler=cmd_load)

    catalog = commands.add_parser(
        "catalog",
        help="load marketplace catalog items from a JSON-lines file",
        description="Load catalog items (item_id, name, price_cents; optionally restaurant_id,"
        " photo_url, available, deleted, featured) that the popular-items shelves are filtered"
        " by when read: an unavailable, deleted or unknown item is never shown, and a"
        " restaurant too new to rank shows its featured items. The latest row per item wins."
        " Bad lines are reported and skipped (exit status 1).",
    )
    catalog.add_argument("file", help="a JSON-lines file, or - for standard input")
    catalog.set_defaults(handler=cmd_catalog)

    publish = commands.add_parser(
        "publish",
        help="rank and publish one snapshot now",
        description="Run the dbt rankings and publish one snapshot.",
    )
    publish.add_argument(
        "--as-of",
        type=_time,
        default=None,
        metavar="TIME",
        help="snapshot time, RFC 3339 (aligned down to the 10-minute bucket for the charts,"
        " 10 seconds for popular, the millisecond for listeners and sale; default now)",
    )
    publish.add_argument(
        "--allow-older",
        action="store_true",
        help="publish an as_of older than the current snapshot's (it becomes the current one);"
        " an as_of in the future is always refused",
    )
    _board_argument(publish, "to publish")
    publish.set_defaults(handler=cmd_publish)

    serve = commands.add_parser(
        "serve", help="serve the read API", description="Serve the read API and the web page."
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument(
        "--publish-every",
        type=float,
        default=None,
        metavar="SECONDS",
        help="also publish snapshots on this interval (embedded: the one process"
        " that owns the data directory must do it)",
    )
    _workers_argument(serve)
    serve.add_argument(
        "--ingest",
        action="store_true",
        help="also consume the Kafka topic (TOPLIST_KAFKA_BROKERS) into the embedded engine",
    )
    serve.set_defaults(handler=cmd_serve)

    schedule = commands.add_parser(
        "schedule",
        help="publish every board on its schedule (server mode's publisher)",
        description="Publish the charts every TOPLIST_PUBLISH_INTERVAL_SECONDS and each other"
        " board on its own refresh, and serve nothing. In server mode this is the one"
        " publisher process; API processes (`toplist serve`) pick up each new snapshot by"
        " polling the registry (TOPLIST_CACHE_POLL_SECONDS). Embedded, use `toplist serve"
        " --publish-every` instead: one process owns the data directory.",
    )
    schedule.set_defaults(handler=cmd_schedule)

    produce = commands.add_parser(
        "produce",
        help="send a board's events from a JSON-lines file to Kafka",
        description="Send each line of FILE as one Kafka message (acks=all, idempotent,"
        " keyed by event_id so a viral song spreads over all partitions; playback reports"
        " by user_id, so a user's reports stay in order); print the counts."
        " Exit status 1 if any message was not acknowledged.",
    )
    produce.add_argument("file", help="a JSON-lines file, or - for standard input")
    produce.add_argument("--brokers", help="host:port[,...] (default TOPLIST_KAFKA_BROKERS)")
    produce.add_argument(
        "--topic", help="topic (default: the board's, e.g. TOPLIST_KAFKA_TOPIC for the charts)"
    )
    _board_argument(produce, "whose events the file holds (it picks the default topic)")
    produce.set_defaults(handler=cmd_produce)

    void = commands.add_parser(
        "void",
        help="void event ids (fraud, refunds, test traffic) on any board that counts events",
        description="Void the event ids listed in FILE, one per line, of the charts, the flash"
        " sale or the marketplace shelves. The raw events stay for audit; voiding twice changes"
        " nothing.",
    )
    void.add_argument("file", help="file of event ids, or - for standard input")
    void.add_argument("--reason", required=True, help="why, e.g. fraud, refund or 'test order'")
    void.add_argument(
        "--board",
        choices=VOIDABLE,
        default=CHARTS.name,
        help="whose events the ids are: charts (listens, the default), sale (orders) or popular"
        " (item events); they stop counting at the board's next publication",
    )
    void.add_argument(
        "--publish", action="store_true", help="publish a corrected snapshot of the board now"
    )
    void.set_defaults(handler=cmd_void)

    rebuild = commands.add_parser(
        "rebuild",
        help="rebuild aggregates from the raw events",
        description="Recompute the bucket aggregates from the raw events (minus voids and"
        " events beyond the late horizon) into a fresh table, widened to whole months, and"
        " swap it in atomically: reads keep working and see the old or the new aggregates."
        " Prints progress per month. Pause ingestion while it runs (embedded mode: it is,"
        " since one process owns the data directory).",
    )
    rebuild.add_argument(
        "--from", dest="start", type=_time, metavar="T", help="first event_time (default: all)"
    )
    rebuild.add_argument(
        "--to", dest="end", type=_time, metavar="T", help="end, exclusive (default: all)"
    )
    _board_argument(rebuild, "to rebuild (another board than the charts is rebuilt whole)")
    rebuild.set_defaults(handler=cmd_rebuild)

    dbt = commands.add_parser(
        "dbt",
        help="run dbt in-process against the configured engine",
        description="Run dbt (e.g. `toplist dbt build`) with the profile"
        " target for the configured engine; embedded runs in-process.",
        add_help=False,
    )
    dbt.add_argument("dbt_args", nargs=argparse.REMAINDER)
    dbt.set_defaults(handler=cmd_dbt)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("apscheduler", "werkzeug", "waitress"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        config = Config.from_env()
        return args.handler(args, config)
    except ConfigError as error:
        _say(f"configuration error: {error}")
        return 2
    except (OSError, ValueError, RuntimeError) as error:
        # PublishError, MigrationError and DbtError are RuntimeErrors with a clear message.
        _say(f"toplist {args.command}: {error}")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
