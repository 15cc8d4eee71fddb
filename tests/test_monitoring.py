"""What ships beside the service for its operators (docker/prometheus, docker/grafana): alert
rules and a Prometheus configuration that promtool accepts, and a dashboard and rules that ask
only for metrics `/metrics` really has, with every board ingesting, a consumer running and a
board published."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml
from conftest import migrated_before
from kafka_support import create_topic, wait_for
from test_api import listens_for
from test_rules import _event

from api.app import create_app
from api.health import INGEST_LAST_MINUTE, INGEST_TOTALS
from ingest.consumer import KafkaIngest
from ingest.load import load_lines
from publish.publisher import publish
from toplist.boards import BOARDS
from toplist.engine import connect
from toplist.migrate import migrate

DOCKER = Path(__file__).resolve().parent.parent / "docker"
RULES = DOCKER / "prometheus" / "alerts.yml"
PROMETHEUS = DOCKER / "prometheus" / "prometheus.yml"
DASHBOARD = DOCKER / "grafana" / "dashboards" / "toplist.json"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def test_promtool_accepts_the_alert_rules_and_the_prometheus_configuration():
    assert Path(PROMTOOL).exists(), "no promtool: `make test` installs Debian's prometheus"
    for command in (["check", "rules", str(RULES)], ["check", "config", str(PROMETHEUS)]):
        run = subprocess.run([PROMTOOL, *command], capture_output=True, text=True, check=False)
        assert run.returncode == 0, run.stdout + run.stderr


def _queried_metrics() -> dict[str, str]:
    """Every metric name the rules and the dashboard ask Prometheus for, and where."""
    asked: dict[str, str] = {}
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            for name in re.findall(r"\btoplist_[a-z_]+", rule["expr"]):
                asked[name] = f"rule {rule['alert']}"
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel["targets"]:
            for name in re.findall(r"\btoplist_[a-z_]+", target.get("expr", "")):
                asked[name] = f"panel {panel['title']!r}"
    return asked


def test_every_metric_the_dashboard_and_the_rules_query_is_in_metrics(
    client, config, kafka_bootstrap
):
    db = config.database
    now = datetime.now(UTC)
    moment = (now - timedelta(minutes=1)).isoformat()
    for name, board in BOARDS.items():
        line = _event(name, 1, moment)
        load_lines(client, db, [line, line, "not json"], board=board)
    topic = f"monitoring-{uuid.uuid4().hex[:8]}"
    consumed = replace(config, kafka_brokers=kafka_bootstrap, kafka_topic=topic)
    create_topic(kafka_bootstrap, consumed.kafka_topic, partitions=1)
    consumer = KafkaIngest(consumed, connect).start()
    app = create_app(config, consumers={"charts": consumer})
    try:
        wait_for(
            lambda: consumer.status.reachable is True and bool(consumer.status.lag),
            60,
            "the consumer to reach Kafka and learn its lag",
        )
        state = app.extensions["toplist"]
        state.on_publication("charts", publish(client, config, now), None)
        api = app.test_client()
        assert api.get("/v1/charts/SE").status_code == 200
        metrics = api.get("/metrics").get_data(as_text=True)
    finally:
        consumer.stop()
        app.extensions["toplist"].close()
    exposed = {line.split("{")[0].split(" ")[0] for line in metrics.splitlines() if line[:1] != "#"}
    missing = {name: where for name, where in _queried_metrics().items() if name not in exposed}
    assert not missing, f"queried but not in /metrics: {missing}"


def test_a_scrape_reads_none_of_the_batch_history(tmp_path):
    """/metrics' ingest counters with a month of batches behind them (300,000 recorded before
    sql/0031): every batch is counted, a batch the crash repair deletes is taken out, and
    neither query a scrape runs reads more than a few granules (before, both read them all)."""
    with migrated_before(31, tmp_path) as (client, config):
        db = config.database
        load_lines(client, db, listens_for({"song-a": 3}))
        for part in range(10):
            client.command(
                f"""
                INSERT INTO {db}.ingest_batches
                    (_batch_id, _source, received_at, received, accepted, rejected, board)
                SELECT generateUUIDv4(), 'kafka',
                       now64(3) - INTERVAL 30 DAY + INTERVAL ({part} * 30000 + number) * 8 SECOND,
                       3, 2, 1, 'sale'
                FROM numbers(30000)
                """
            )
        migrate(client, config)
        gone = load_lines(client, db, listens_for({"song-b": 4})).batch_ids[0]
        load_lines(client, db, listens_for({"song-c": 5}))
        client.command(f"DELETE FROM {db}.ingest_batches WHERE _batch_id = '{gone}'")
        for query in (INGEST_TOTALS, INGEST_LAST_MINUTE):
            [(_, _, _, rows, _)] = client.query(
                f"EXPLAIN ESTIMATE {query.format(db=db)}"
            ).result_rows
            assert rows <= 3 * 8192, f"a scrape reads {rows} rows of 300,000 batches' history"
        app = create_app(config)
        try:
            text = app.test_client().get("/metrics").get_data(as_text=True)
        finally:
            app.extensions["toplist"].close()
        for line in (
            'toplist_ingest_messages_total{board="charts",outcome="accepted",source="load"} 8',
            'toplist_ingest_messages_total{board="sale",outcome="accepted",source="kafka"} 600000',
            'toplist_ingest_messages_total{board="sale",outcome="rejected",source="kafka"} 300000',
            'toplist_ingest_rate_per_second{board="sale",source="kafka"} 0',
        ):
            assert line in text, f"/metrics lacks {line}"
        rate = next(
            x
            for x in text.splitlines()
            if x.startswith('toplist_ingest_rate_per_second{board="charts"')
        )
        assert float(rate.split()[-1]) == 8 / 60, (
            "the last minute's listens (song-a's and song-c's)"
        )
