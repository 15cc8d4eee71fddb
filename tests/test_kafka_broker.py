"""The development Kafka broker, restarted under a running consumer: ingestion resumes alone."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from kafka_support import create_topic, received, wait_for
from reference import align
from test_pipeline import AS_OF

from api.app import create_app
from ingest.consumer import KafkaIngest
from ingest.generator import ListenGenerator
from ingest.kafka_broker import start_broker
from ingest.produce import produce_lines
from toplist.engine import connect


def test_a_broker_restart_mid_stream_loses_nothing_and_ingestion_resumes(tmp_path, client, config):
    broker = start_broker(tmp_path / "kafka")
    try:
        config = replace(
            config,
            kafka_brokers=broker.bootstrap,
            kafka_batch_rows=1_000,
            kafka_batch_seconds=0.2,
            kafka_bulk_batch_seconds=0.2,
        )
        create_topic(broker.bootstrap, config.kafka_topic)
        aligned = align(AS_OF)
        generator = ListenGenerator(seed=31)
        before = generator.batch(3_000, aligned - timedelta(days=1), aligned, malformed=2)
        after = generator.batch(
            3_000,
            aligned - timedelta(days=1),
            aligned,
            retry_fraction=0.1,
            retry_from=before.listens,
        )
        ingest = KafkaIngest(config, connect).start()
        app = create_app(config, consumers={"charts": ingest})
        api = app.test_client()
        try:
            produce_lines(broker.bootstrap, config.kafka_topic, before.lines)
            wait_for(
                lambda: received(client, config.database) == len(before.lines), 60, "the first half"
            )
            wait_for(lambda: ingest.status.reachable is True, 30, "a first probe")
            broker.stop()  # the consumer keeps running and sees the broker go away
            wait_for(lambda: ingest.status.last_error is not None, 30, "the consumer to notice")
            wait_for(lambda: ingest.status.reachable is False, 30, "the probe to fail")
            health = api.get("/healthz").get_json()
            assert health["status"] == "degraded", health
            down = health["kafka"]["charts"]
            assert down["reachable"] is False and down["last_error"], down
            assert down["lag"] is None, "a lag that cannot be known is reported as a number"
            broker.start()  # same port, same log directory
            produce_lines(broker.bootstrap, config.kafka_topic, after.lines)
            wait_for(
                lambda: received(client, config.database) >= len(before.lines + after.lines),
                120,
                "ingestion to resume by itself after the restart",
            )
            wait_for(lambda: ingest.status.last_error is None, 30, "the error to clear")
            health = api.get("/healthz").get_json()
            assert health["status"] == "ok", health
            back = health["kafka"]["charts"]
            assert back["reachable"] is True and back["lag"] is not None, back
            assert back["running"] is True and back["topic"] == config.kafka_topic, back
            sent = len(before.lines + after.lines)
            wait_for(lambda: api.get("/healthz").get_json()["kafka"]["charts"]["messages"] == sent,
                     10, "messages to count every message written")  # fmt: skip
            wait_for(lambda: api.get("/healthz").get_json()["kafka"]["charts"]["lag"] == 0,
                     30, "lag to fall to 0 once every message is written")  # fmt: skip
        finally:
            ingest.stop()
            app.extensions["toplist"].close()
        assert ingest.status.running is False
        counts = client.query(
            f"SELECT (SELECT count() FROM {config.database}.listens),"
            f" (SELECT count() FROM {config.database}.listens_dead_letters)"
        ).result_rows[0]
        assert counts == (len(before.listens) + len(after.listens), before.malformed), (
            "totals after a broker restart differ from what was sent"
        )
    finally:
        broker.stop()
