"""The `toplist` command, run as a user runs it: a separate process on its own data dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

from ingest.generator import ListenGenerator
from toplist.boards import BOARDS
from toplist.config import Config

COMMANDS = [
    "run", "migrate", "load", "catalog", "publish", "serve", "schedule", "produce", "void",
    "rebuild",
]  # fmt: skip


def toplist(tmp_path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return _on_data_dir(tmp_path, ["-m", "toplist.cli", *args], stdin)


def with_env(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """The CLI with these arguments and environment variables set (no data directory)."""
    return subprocess.run(
        [sys.executable, "-m", "toplist.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=False,
    )


def _on_data_dir(tmp_path, argv: list[str], stdin: str | None) -> subprocess.CompletedProcess:
    """Python with these arguments, as a process of its own on the test's data directory.

    The database is pinned too: dbt runs in the test process and exports TOPLIST_DATABASE
    there for its profiles (publish/dbt.py), which children would otherwise inherit.
    """
    env = {
        **os.environ,
        "TOPLIST_CLICKHOUSE_URL": f"chdb://{tmp_path / 'engine'}",
        "TOPLIST_DATABASE": "toplist",
    }
    return subprocess.run(
        [sys.executable, *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_every_command_has_help(tmp_path):
    top = toplist(tmp_path, "--help")
    assert top.returncode == 0
    for command in COMMANDS:
        assert command in top.stdout, f"`toplist --help` does not list {command}"
        result = toplist(tmp_path, command, "--help")
        assert result.returncode == 0 and "usage: toplist" in result.stdout, command


def test_load_publish_void_rebuild_follow_one_another(tmp_path):
    as_of = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    batch = ListenGenerator(seed=2).batch(1_000, as_of - timedelta(days=2), as_of, malformed=4)
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(batch.lines) + "\n\n \r\n")  # two blank lines at the end

    loaded = toplist(tmp_path, "load", str(events))
    assert loaded.returncode == 0, loaded.stderr
    assert (
        f"read {len(batch.lines) + 2:,} · accepted 1,000 · duplicates {batch.duplicates:,}"
        f" · rejected 4 (see toplist.listens_dead_letters) · blank 2 (skipped)" in loaded.stdout
    ), loaded.stdout

    published = toplist(tmp_path, "publish", "--as-of", "2026-12-01T12:09:59Z")
    assert published.returncode == 0, published.stderr
    snapshot = json.loads(published.stdout)
    assert snapshot["as_of"] == "2026-12-01T12:00:00Z" and snapshot["policy"] == "v1"

    ids = "\n".join(listen.event_id for listen in batch.listens[:10])
    voided = toplist(tmp_path, "void", "-", "--reason", "test traffic", "--publish", stdin=ids)
    assert voided.returncode == 0, voided.stderr
    assert "voided 10" in voided.stdout and "(10 voided events excluded)" in voided.stdout
    refund = toplist(tmp_path, "void", "-", "--board", "sale", "--reason", "refund", stdin="o-1")
    assert refund.returncode == 0, refund.stderr
    assert "1 ids · voided 0 · already voided 0 · not found 1" in refund.stdout
    live = toplist(tmp_path, "void", "-", "--board", "listeners", "--reason", "x", stdin="p")
    assert live.returncode == 2 and "invalid choice: 'listeners'" in live.stderr

    # The two days of events straddle the month boundary: November and December.
    rebuilt = toplist(tmp_path, "rebuild")
    assert rebuilt.returncode == 0 and "rebuilt 2 month(s)" in rebuilt.stdout, rebuilt.stderr
    assert "[1/2] 2026-11 recounted" in rebuilt.stderr
    assert "[2/2] 2026-12 recounted" in rebuilt.stderr


def test_bad_input_gets_a_clear_message(tmp_path):
    missing = toplist(tmp_path, "load", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 1 and "No such file" in missing.stderr
    bad_time = toplist(tmp_path, "publish", "--as-of", "yesterday")
    assert bad_time.returncode == 2 and "not a time" in bad_time.stderr
    bad_workers = toplist(tmp_path, "serve", "--workers", "-1")
    assert bad_workers.returncode == 2 and "not a number of processes" in bad_workers.stderr
    assert "Traceback" not in bad_workers.stderr
    bad_config = with_env({"TOPLIST_KEEP_TOP": "many"}, "migrate")
    assert bad_config.returncode == 2 and "TOPLIST_KEEP_TOP must be an integer" in bad_config.stderr


def test_migrate_render_prints_the_cluster_ddl_and_connects_to_nothing(tmp_path):
    from toplist.config import Config
    from toplist.migrate import render_text

    rendered = toplist(tmp_path, "migrate", "--render", "--cluster", "toplist")
    assert rendered.returncode == 0, rendered.stderr
    expected = Config(
        clickhouse_url="http://localhost:8123", database="toplist", clickhouse_cluster="toplist"
    )
    assert rendered.stdout == render_text(expected)
    assert "CREATE TABLE IF NOT EXISTS toplist.listens_local ON CLUSTER 'toplist'" in (
        rendered.stdout
    )
    assert not (tmp_path / "engine").exists(), "--render opened the engine"
    single = toplist(tmp_path, "migrate", "--render")
    assert single.returncode == 0 and "ON CLUSTER" not in single.stdout
    assert "\nCREATE TABLE IF NOT EXISTS toplist.listens\n" in single.stdout
    alone = toplist(tmp_path, "migrate", "--cluster", "toplist")
    assert alone.returncode == 2 and "--cluster goes with --render" in alone.stderr
    on_cluster = {"TOPLIST_CLICKHOUSE_URL": "http://127.0.0.1:9", "TOPLIST_CLICKHOUSE_CLUSTER": "x"}
    rebuild = with_env(on_cluster, "rebuild")
    assert rebuild.returncode == 2 and "not built for a cluster" in rebuild.stderr


def in_engine(tmp_path, code: str, stdin: str = "") -> str:
    """Run Python against the command's data directory, in a process of its own."""
    script = (
        "import sys, uuid\nfrom toplist.config import Config\nfrom toplist.engine import session\n"
        "with session(Config.from_env()) as client:\n"
        + "".join(f"    {x}\n" for x in code.splitlines())
    )
    done = _on_data_dir(tmp_path, ["-c", script], stdin)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_load_first_finishes_a_batch_a_crash_cut_off(tmp_path):
    as_of = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    generator = ListenGenerator(seed=5)
    cut, fresh = (generator.batch(300, as_of - timedelta(days=1), as_of) for _ in range(2))
    assert toplist(tmp_path, "migrate").returncode == 0
    # Step 1 of a write (the batch stored in the log), then the process died.
    in_engine(
        tmp_path,
        "batch = uuid.uuid4()\n"
        "rows = [[line, 'load', batch] for line in sys.stdin.read().splitlines()]\n"
        "client.insert('toplist.listens_incoming_log', rows,"
        " column_names=['raw_message', '_source', '_batch_id'])",
        stdin="\n".join(cut.lines),
    )
    events = tmp_path / "fresh.jsonl"
    events.write_text("\n".join(fresh.lines) + "\n")
    loaded = toplist(tmp_path, "load", str(events))
    assert loaded.returncode == 0, loaded.stderr
    counted = in_engine(tmp_path, "print(client.command('SELECT count() FROM toplist.listens'))")
    assert int(counted) == len(cut.listens) + len(fresh.listens), (
        "`toplist load` did not finish the batch a crash had cut off"
    )


def test_schedule_publishes_every_board_and_stops_cleanly_on_sigterm(tmp_path):
    """Server mode's publisher process: every board published on its own schedule."""
    import signal
    import time

    env = {
        **os.environ,
        "TOPLIST_CLICKHOUSE_URL": f"chdb://{tmp_path / 'engine'}",
        "TOPLIST_DATABASE": "toplist",
        "TOPLIST_PUBLISH_INTERVAL_SECONDS": "3",
        "TOPLIST_LISTENERS_REFRESH_SECONDS": "2",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "toplist.cli", "schedule"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        time.sleep(25)
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output[-3000:]
    for board in ("listeners", "sale", "popular"):
        assert f"published {board} snapshot" in output, f"{board}: {output[-2000:]}"
    assert output.count("published listeners snapshot") >= 2, "listeners every 2 s"
    assert "published charts snapshot" in output


def test_a_data_directory_in_use_is_said_in_one_line(tmp_path):
    """One process owns an embedded data directory; a second command on it says so, and what
    to do, in one line instead of the engine's traceback."""
    env = {**os.environ, "TOPLIST_CLICKHOUSE_URL": f"chdb://{tmp_path / 'engine'}"}
    holder = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, time; from toplist.config import Config;"
            " from toplist.engine import connect; engine = connect(Config.from_env());"
            " engine.command('SELECT 1');"
            " print('open', flush=True); time.sleep(60)"
        )],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "open"
        second = toplist(tmp_path, "migrate")
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert second.returncode == 1
    assert second.stderr.strip().splitlines() == [
        f"toplist migrate: the data directory {tmp_path / 'engine'} is in use by another Toplist"
        " process (embedded ClickHouse lets one process own it): stop that process, or run this"
        " inside it (`toplist serve --ingest` loads from Kafka), or point TOPLIST_CLICKHOUSE_URL"
        " at a ClickHouse server"
    ], second.stderr


def test_clickhouse_own_databases_are_refused_up_front(tmp_path):
    for name in ("INFORMATION_SCHEMA", "system", "information_schema"):
        env = {**os.environ, "TOPLIST_CLICKHOUSE_URL": f"chdb://{tmp_path / 'engine'}",
               "TOPLIST_DATABASE": name}  # fmt: skip
        run = subprocess.run(
            [sys.executable, "-m", "toplist.cli", "migrate"],
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )  # fmt: skip
        assert run.returncode == 2, f"{name}: {run.stdout}{run.stderr}"
        assert run.stderr.strip().splitlines() == [
            f"configuration error: TOPLIST_DATABASE {name!r} is one of ClickHouse's own"
            " databases (_temporary_and_external_tables, information_schema, system);"
            " choose another name"
        ], run.stderr


def test_serve_on_a_port_in_use_says_so_without_announcing_itself(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = toplist(tmp_path, "serve", "--host", "127.0.0.1", "--port", str(port))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "serving" not in run.stdout + run.stderr, "announced an API that never listened"
    (message,) = [line for line in run.stderr.splitlines() if line.startswith("toplist serve:")]
    assert "in use" in message, run.stderr
    assert "Traceback" not in run.stderr


def test_shelf_and_scoring_settings_that_cannot_work_are_refused_in_one_line():
    for env, says in [
        ({"TOPLIST_SHELF_MIN_ORDERS": "500"}, "TOPLIST_SHELF_MIN_ORDERS (500) cannot exceed"),
        ({"TOPLIST_SHELF_MIN_ORDERS": "0"}, "TOPLIST_SHELF_MIN_ORDERS must be at least 1"),
        ({"TOPLIST_SHELF_FALLBACK_AFTER_SECONDS": "-5"}, "must be positive"),
        ({"TOPLIST_SCORING_VERSION": "v7"}, "TOPLIST_SCORING_VERSION must be one of"),
        ({"TOPLIST_SCORING_VERSIONS": "v2"}, "v1 among them"),
        ({"TOPLIST_SCORING_VERSIONS": "v1,v9"}, "TOPLIST_SCORING_VERSIONS must list"),
        ({"TOPLIST_BULK_THREAD_PRIORITY": "20"}, "TOPLIST_BULK_THREAD_PRIORITY is a nice value"),
        ({"TOPLIST_BULK_THREAD_PRIORITY": "-1"}, "TOPLIST_BULK_THREAD_PRIORITY must be at least 0"),
        ({"TOPLIST_LIVE_THREAD_PRIORITY": "11"}, "the live boards never go after the others"),
        ({"TOPLIST_LIVE_THREAD_PRIORITY": "-21"}, "TOPLIST_LIVE_THREAD_PRIORITY must be at least"),
    ]:
        done = with_env(env, "migrate")
        assert done.returncode == 2 and says in done.stderr, (env, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_every_nice_value_the_priorities_name_is_taken():
    """0 and -20 are nice values too: the priorities take the whole range their messages give
    (the bulk one refused 0, "as the engine's other threads", as "must be at least 1" before)."""
    config = Config.from_env(
        {"TOPLIST_BULK_THREAD_PRIORITY": "0", "TOPLIST_LIVE_THREAD_PRIORITY": "-20"}
    )
    assert (config.bulk_thread_priority, config.live_thread_priority) == (0, -20)
    assert (config.thread_priority("charts"), config.thread_priority("sale")) == (0, -20)


def test_the_live_boards_batch_by_the_half_second_and_the_others_by_two_seconds():
    """An insert has a fixed cost: the boards published on a refresh gather longer batches,
    the ones published as their events arrive keep short ones (both settable, both checked)."""
    config = Config.from_env({})
    assert {board: config.batch_seconds(board) for board in BOARDS} == {
        "charts": 2.0, "listeners": 0.5, "sale": 0.5, "popular": 2.0,
    }  # fmt: skip
    config = Config.from_env(
        {"TOPLIST_KAFKA_BATCH_SECONDS": "0.2", "TOPLIST_KAFKA_BULK_BATCH_SECONDS": "5"}
    )
    assert (config.batch_seconds("sale"), config.batch_seconds("popular")) == (0.2, 5.0)
    done = with_env({"TOPLIST_KAFKA_BULK_BATCH_SECONDS": "0"}, "migrate")
    assert done.returncode == 2 and "TOPLIST_KAFKA_BULK_BATCH_SECONDS must be positive" in (
        done.stderr
    )
