-- requires: kafka_engine
-- Server mode: with TOPLIST_KAFKA_CONSUMERS above 1, each Kafka engine table gets a thread per
-- consumer (kafka_thread_per_consumer = 1); without it the consumers share one thread and a
-- second consumer adds nothing (ClickHouse issue 35153). A Kafka table's settings are fixed at
-- creation, so each is dropped and created again with its view (the text of 0009 and 0018, the
-- new setting added; made from one template). The consumer group and its committed offsets
-- stay in Kafka, so consumption resumes where it stopped; the engine commits only after a
-- block is written (at-least-once), and the exact dedup behind the incoming tables keeps the
-- counts exact.

DROP TABLE ${database}.listens_kafka_mv;

DROP TABLE ${database}.listens_kafka;

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
    kafka_thread_per_consumer = ${kafka_thread_per_consumer},
    kafka_handle_error_mode = 'stream',
    kafka_max_block_size = 65536,
    kafka_flush_interval_ms = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.listens_kafka_mv
TO ${database}.listens_incoming
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

DROP TABLE ${database}.playbacks_kafka_mv;

DROP TABLE ${database}.playbacks_kafka;

CREATE TABLE IF NOT EXISTS ${database}.playbacks_kafka
(
    message String
)
ENGINE = Kafka
SETTINGS
    kafka_broker_list = '${kafka_brokers}',
    kafka_topic_list = '${kafka_topic_listeners}',
    kafka_group_name = '${kafka_group}-listeners',
    kafka_format = 'JSONAsString',
    kafka_num_consumers = ${kafka_consumers},
    kafka_thread_per_consumer = ${kafka_thread_per_consumer},
    kafka_handle_error_mode = 'stream',
    kafka_max_block_size = 65536,
    kafka_flush_interval_ms = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.playbacks_kafka_mv
TO ${database}.playbacks_incoming
AS SELECT
    if(_error = '', message, _raw_message) AS raw_message,
    _topic,
    toInt32(_partition) AS _partition,
    toInt64(_offset) AS _offset,
    toTimeZone(_timestamp_ms, 'UTC') AS _timestamp,
    'kafka-engine' AS _source,
    reinterpretAsUUID(sipHash128(_topic, _partition, toStartOfMinute(now()))) AS _batch_id,
    now64(3) AS _received_at
FROM ${database}.playbacks_kafka;

DROP TABLE ${database}.orders_kafka_mv;

DROP TABLE ${database}.orders_kafka;

CREATE TABLE IF NOT EXISTS ${database}.orders_kafka
(
    message String
)
ENGINE = Kafka
SETTINGS
    kafka_broker_list = '${kafka_brokers}',
    kafka_topic_list = '${kafka_topic_sale}',
    kafka_group_name = '${kafka_group}-sale',
    kafka_format = 'JSONAsString',
    kafka_num_consumers = ${kafka_consumers},
    kafka_thread_per_consumer = ${kafka_thread_per_consumer},
    kafka_handle_error_mode = 'stream',
    kafka_max_block_size = 65536,
    kafka_flush_interval_ms = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.orders_kafka_mv
TO ${database}.orders_incoming
AS SELECT
    if(_error = '', message, _raw_message) AS raw_message,
    _topic,
    toInt32(_partition) AS _partition,
    toInt64(_offset) AS _offset,
    toTimeZone(_timestamp_ms, 'UTC') AS _timestamp,
    'kafka-engine' AS _source,
    reinterpretAsUUID(sipHash128(_topic, _partition, toStartOfMinute(now()))) AS _batch_id,
    now64(3) AS _received_at
FROM ${database}.orders_kafka;

DROP TABLE ${database}.item_events_kafka_mv;

DROP TABLE ${database}.item_events_kafka;

CREATE TABLE IF NOT EXISTS ${database}.item_events_kafka
(
    message String
)
ENGINE = Kafka
SETTINGS
    kafka_broker_list = '${kafka_brokers}',
    kafka_topic_list = '${kafka_topic_popular}',
    kafka_group_name = '${kafka_group}-popular',
    kafka_format = 'JSONAsString',
    kafka_num_consumers = ${kafka_consumers},
    kafka_thread_per_consumer = ${kafka_thread_per_consumer},
    kafka_handle_error_mode = 'stream',
    kafka_max_block_size = 65536,
    kafka_flush_interval_ms = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.item_events_kafka_mv
TO ${database}.item_events_incoming
AS SELECT
    if(_error = '', message, _raw_message) AS raw_message,
    _topic,
    toInt32(_partition) AS _partition,
    toInt64(_offset) AS _offset,
    toTimeZone(_timestamp_ms, 'UTC') AS _timestamp,
    'kafka-engine' AS _source,
    reinterpretAsUUID(sipHash128(_topic, _partition, toStartOfMinute(now()))) AS _batch_id,
    now64(3) AS _received_at
FROM ${database}.item_events_kafka;
