"""`toplist produce` and `toplist serve --ingest` as separate processes, killed mid-stream."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from datetime import UTC, datetime, timedelta

from kafka_support import create_topic, uncommitted, wait_for
from reference import boards

from ingest.generator import ListenGenerator
from ingest.kafka_broker import free_port


def _get(port: int, path: str):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        body = response.read().decode()
    return json.loads(body) if path != "/metrics" else body


def _metric(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    prefix = f"{name}{{{wanted}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.split()[-1])
    return 0.0


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _answers(port: int) -> bool:
    try:
        _get(port, "/healthz")
        return True
    except OSError:
        return False


def test_killed_consumer_process_loses_nothing_and_counts_nothing_twice(tmp_path, kafka_bootstrap):
    topic = f"listens-kill-{os.getpid()}-{tmp_path.name}"[:200]
    create_topic(kafka_bootstrap, topic)
    env = {
        **os.environ,
        "TOPLIST_CLICKHOUSE_URL": f"chdb://{tmp_path / 'engine'}",
        "TOPLIST_KAFKA_BROKERS": kafka_bootstrap,
        "TOPLIST_KAFKA_TOPIC": topic,
        "TOPLIST_KAFKA_GROUP": f"group-{tmp_path.name}",
        # Small batches, so the stream takes long enough to be killed in the middle of it.
        "TOPLIST_KAFKA_BATCH_ROWS": "100",
        "TOPLIST_KAFKA_BATCH_SECONDS": "0.05",
        "TOPLIST_KAFKA_BULK_BATCH_SECONDS": "0.05",
    }
    now = datetime.now(UTC)
    batch = ListenGenerator(seed=21, songs=150).batch(
        20_000,
        now - timedelta(days=2),
        now - timedelta(minutes=20),
        retry_fraction=0.05,
        malformed=6,
    )
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(batch.lines) + "\n")

    produced = subprocess.run(
        [sys.executable, "-m", "toplist.cli", "produce", str(events)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert produced.returncode == 0, produced.stderr
    sent = len(batch.lines)
    assert f"sent {sent:,} · acknowledged {sent:,} · failed 0" in produced.stdout

    port = free_port()
    serve = [sys.executable, "-m", "toplist.cli", "serve", "--ingest", "--port", str(port)]
    log = (tmp_path / "serve.log").open("w")
    first = subprocess.Popen(serve, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: _answers(port), 120, "the API to start")
        wait_for(
            lambda: _get(port, "/healthz")["kafka"]["charts"]["messages"] >= 1_000, 60, "consuming"
        )
        seen = _get(port, "/healthz")["kafka"]["charts"]["messages"]
        first.send_signal(signal.SIGKILL)  # no clean stop: batches may be written, not committed
        first.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
    assert seen < sent, "the process should have been killed mid-stream"

    second = subprocess.Popen(
        [*serve, "--publish-every", "2"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        wait_for(lambda: _answers(port), 120, "the API to restart")

        def caught_up() -> bool:
            metrics = _get(port, "/metrics")
            done = _metric(
                metrics,
                "toplist_ingest_messages_total",
                board="charts",
                source="kafka",
                outcome="accepted",
            )
            return (
                done >= len(batch.listens) and _get(port, "/healthz")["kafka"]["charts"]["lag"] == 0
            )

        wait_for(caught_up, 120, "the restarted consumer to catch up")
        caught_up_at = datetime.now(UTC)

        # The second snapshot finished after the catch-up started after the first one ended,
        # so it read everything.
        after: set[str] = set()

        def started_after_catch_up() -> bool:
            snapshot = _get(port, "/healthz")["boards"]["charts"]
            if snapshot and _time(snapshot["published_at"]) > caught_up_at:
                after.add(snapshot["snapshot_id"])
            return len(after) >= 2

        wait_for(started_after_catch_up, 120, "a snapshot started after the catch-up")
        metrics = _get(port, "/metrics")
        assert _metric(
            metrics,
            "toplist_ingest_messages_total",
            board="charts",
            source="kafka",
            outcome="accepted",
        ) == len(batch.listens), "an event was counted twice"
        assert (
            _metric(
                metrics,
                "toplist_ingest_messages_total",
                board="charts",
                source="kafka",
                outcome="rejected",
            )
            == batch.malformed
        )
        # The other boards' consumers run beside it, each on its own topic, and say so.
        boards_kafka = _get(port, "/healthz")["kafka"]
        assert {b: c["running"] for b, c in boards_kafka.items()} == {
            "charts": True,
            "listeners": True,
            "sale": True,
            "popular": True,
        }
        assert boards_kafka["sale"]["topic"] == "orders"
        assert _metric(metrics, "toplist_kafka_consumer_up", board="popular") == 1
        family = ""  # each sample must come under its own metric's TYPE line
        for line in metrics.splitlines():
            if line.startswith("# TYPE"):
                family = line.split()[2]
            elif line and not line.startswith("#"):
                name = line.split("{")[0].split()[0]
                assert name in {family, *(family + end for end in ("_bucket", "_sum", "_count"))}, (
                    f"{name} is split from its metric's other samples"
                )
        for scope, window in (("global", "all"), ("US", "24h"), ("SE", "24h"), ("BR", "1h")):
            chart = _get(port, f"/v1/charts/{scope}?window={window}&k=1000")
            expected = boards(batch.listens, _time(chart["as_of"])).get((window, scope), [])
            got = [(item["song_id"], item["listens"]) for item in chart["items"]]
            assert got == expected, f"{scope}/{window} differs from the reference"
        # docker stop: SIGTERM stops as cleanly as Ctrl-C, every consumer committing what it
        # wrote, so a restart has nothing of the topic to take again.
        second.send_signal(signal.SIGTERM)
        assert second.wait(60) == 0
    finally:
        if second.poll() is None:
            second.kill()
        log.close()
    output = (tmp_path / "serve.log").read_text()
    assert output.count("Kafka consumer stopped") == 4, output[-3000:]  # charts and 3 boards
    assert output.rstrip().endswith("stopped"), output[-3000:]
    assert uncommitted(kafka_bootstrap, f"group-{tmp_path.name}", topic) == 0
