"""The development Kafka broker: a real KRaft broker fetched with Maven and started here."""

from __future__ import annotations

from kafka import KafkaConsumer, KafkaProducer

from ingest.kafka_broker import start_broker


def test_broker_starts_round_trips_messages_and_survives_a_restart(tmp_path):
    broker = start_broker(tmp_path / "kafka")
    try:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        producer.send("listens", key=b"evt-1", value=b'{"event_id": "evt-1"}').get(timeout=30)
        broker.stop()
        broker.start()
        producer.send("listens", key=b"evt-2", value=b'{"event_id": "evt-2"}').get(timeout=60)
        producer.close()
        consumer = KafkaConsumer(
            "listens",
            bootstrap_servers=broker.bootstrap,
            auto_offset_reset="earliest",
            consumer_timeout_ms=15_000,
        )
        values = sorted(message.value for message in consumer)
        consumer.close()
        assert values == [b'{"event_id": "evt-1"}', b'{"event_id": "evt-2"}'], (
            "a message was lost across a broker restart"
        )
    finally:
        broker.stop()
