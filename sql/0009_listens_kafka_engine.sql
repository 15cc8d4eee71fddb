-- requires: kafka_engine
-- Server mode: ClickHouse consumes the listens topic itself and writes the same rows into
-- listens_incoming that the embedded consumer (ingest/consumer.py) and `toplist load` write, so
-- parsing, validation, dedup and dead-lettering stay in one place (0002..0004).
-- Rendered from TOPLIST_KAFKA_BROKERS/_TOPIC/_GROUP/_CONSUMERS; applied only in server mode.
-- JSONAsString takes each message whole; with kafka_handle_error_mode='stream' a message that
-- is not even a JSON object arrives with _error set and its bytes in _raw_message, and is
-- dead-lettered by the parse view like any other malformed event instead of stopping the
-- consumer. Offsets are committed by the engine after the view's insert (at-least-once); the
-- exact dedup behind listens_incoming makes the counts exactly-once.
CREATE TABLE IF NOT EXISTS ${database}.listens_kafka
(
    message String
)
ENGINE = Kafka
SETTINGS
    kafka_broker_list = '${kafka_brokers}',
    kafka_topic_list = '${kafka_topic}',
    kafka_group_name = '${kafka_group}',
    kafka_format = 'JSONAsString',
    kafka_num_consumers = ${kafka_consumers},
    kafka_handle_error_mode = 'stream',
    kafka_max_block_size = 65536,
    kafka_flush_interval_ms = 1000;

-- One ingest batch per partition and minute, so ingest_batches stays small under a stream.
CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.listens_kafka_mv
TO ${database}.listens_incoming
(
    raw_message String,
    _topic LowCardinality(String),
    _partition Int32,
    _offset Int64,
    _timestamp Nullable(DateTime64(3, 'UTC')),
    _source LowCardinality(String),
    _batch_id UUID,
    _received_at DateTime64(3, 'UTC')
)
AS SELECT
    if(_error = '', message, _raw_message) AS raw_message,
    _topic,
    toInt32(_partition) AS _partition,
    toInt64(_offset) AS _offset,
    toTimeZone(_timestamp_ms, 'UTC') AS _timestamp,
    'kafka-engine' AS _source,
    reinterpretAsUUID(sipHash128(_topic, _partition, toStartOfMinute(now()))) AS _batch_id,
    now64(3) AS _received_at
FROM ${database}.listens_kafka;
