-- requires: kafka_engine
-- Server mode: ClickHouse consumes the other boards' topics itself, as it does the listens
-- topic (0009), into each board's incoming table (0015..0017), where the same validation and
-- dead-lettering run as for the embedded consumer and `toplist load`. Rendered from
-- TOPLIST_KAFKA_TOPIC_LISTENERS/_SALE/_POPULAR, the group `<TOPLIST_KAFKA_GROUP>-<board>`,
-- and the brokers and consumers of 0009; applied only in server mode.
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
    kafka_handle_error_mode = 'stream',
    kafka_max_block_size = 65536,
    kafka_flush_interval_ms = 1000;

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
    kafka_handle_error_mode = 'stream',
    kafka_max_block_size = 65536,
    kafka_flush_interval_ms = 1000;

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
    kafka_handle_error_mode = 'stream',
    kafka_max_block_size = 65536,
    kafka_flush_interval_ms = 1000;

-- As listens_kafka_mv (0009): one ingest batch per topic, partition and minute.
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
