-- The flash sale (issue 5): order events, on their own topic and through
-- `toplist load --board sale`, into the same machinery as listens (see 0015).
CREATE TABLE IF NOT EXISTS ${database}.orders_incoming AS ${database}.listens_incoming;
CREATE TABLE IF NOT EXISTS ${database}.orders_incoming_log AS ${database}.listens_incoming_log;
CREATE TABLE IF NOT EXISTS ${database}.orders_incoming_done AS ${database}.listens_incoming_done;
CREATE TABLE IF NOT EXISTS ${database}.orders_dead_letters AS ${database}.listens_dead_letters;

-- The raw order events, one row per event_id once merged. The sums the boards rank by are
-- exact: a publication counts the first copy of each event_id (models/sale/), so neither a
-- redelivery nor an unmerged part can count twice.
CREATE TABLE IF NOT EXISTS ${database}.orders
(
    event_id String,
    order_id String,
    product_id String,
    buyer_id String,
    units UInt64,
    amount_cents UInt64,
    event_time DateTime64(3, 'UTC'),
    _topic LowCardinality(String),
    _partition Int32,
    _offset Int64,
    _timestamp Nullable(DateTime64(3, 'UTC')),
    _source LowCardinality(String),
    _batch_id UUID,
    _received_at DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(event_time)
ORDER BY event_id;

-- The order contract: event_id, order_id and buyer_id 1-128 bytes, product_id 1-256 bytes,
-- units a positive integer, amount_cents a non-negative integer, event_time as for listens.
CREATE TABLE IF NOT EXISTS ${database}.orders_parsed
(
    event_id String,
    order_id String,
    product_id String,
    buyer_id String,
    units UInt64,
    amount_cents UInt64,
    event_time Nullable(DateTime64(3, 'UTC')),
    reject_reason String,
    raw_message String,
    _topic LowCardinality(String),
    _partition Int32,
    _offset Int64,
    _timestamp Nullable(DateTime64(3, 'UTC')),
    _source LowCardinality(String),
    _batch_id UUID,
    _received_at DateTime64(3, 'UTC')
)
ENGINE = Null;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.orders_parsed_mv
TO ${database}.orders_parsed
AS
WITH isValidJSON(raw_message) AND JSONType(raw_message) = 'Object' AS is_object
SELECT
    if(is_object, JSONExtractString(raw_message, 'event_id'), '') AS event_id,
    if(is_object, JSONExtractString(raw_message, 'order_id'), '') AS order_id,
    if(is_object, JSONExtractString(raw_message, 'product_id'), '') AS product_id,
    if(is_object, JSONExtractString(raw_message, 'buyer_id'), '') AS buyer_id,
    if(is_object, JSONExtractUInt(raw_message, 'units'), 0) AS units,
    if(is_object, JSONExtractUInt(raw_message, 'amount_cents'), 0) AS amount_cents,
    if(is_object, toplist_json_time(raw_message, 'event_time'), NULL) AS event_time,
    multiIf(
        NOT is_object, 'not a JSON object',
        toplist_json_string_problem(raw_message, 'event_id', 1, 128) != '',
            toplist_json_string_problem(raw_message, 'event_id', 1, 128),
        toplist_json_string_problem(raw_message, 'order_id', 1, 128) != '',
            toplist_json_string_problem(raw_message, 'order_id', 1, 128),
        toplist_json_string_problem(raw_message, 'product_id', 1, 256) != '',
            toplist_json_string_problem(raw_message, 'product_id', 1, 256),
        toplist_json_string_problem(raw_message, 'buyer_id', 1, 128) != '',
            toplist_json_string_problem(raw_message, 'buyer_id', 1, 128),
        JSONType(raw_message, 'units') NOT IN ('Int64', 'UInt64')
            OR JSONExtractInt(raw_message, 'units') < 1,
            'units: missing, or not a positive integer',
        JSONType(raw_message, 'amount_cents') NOT IN ('Int64', 'UInt64')
            OR JSONExtractInt(raw_message, 'amount_cents') < 0,
            'amount_cents: missing, or not a non-negative integer',
        toplist_json_time_problem(raw_message, 'event_time')
    ) AS reject_reason,
    raw_message,
    _topic,
    _partition,
    _offset,
    _timestamp,
    _source,
    _batch_id,
    _received_at
FROM ${database}.orders_incoming;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.orders_mv
TO ${database}.orders
AS SELECT
    event_id, order_id, product_id, buyer_id, units, amount_cents,
    assumeNotNull(event_time) AS event_time,
    _topic, _partition, _offset, _timestamp, _source, _batch_id, _received_at
FROM ${database}.orders_parsed
WHERE reject_reason = '';

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.orders_dead_letters_mv
TO ${database}.orders_dead_letters
AS SELECT
    raw_message, reject_reason AS reason,
    _topic, _partition, _offset, _timestamp, _source, _batch_id, _received_at
FROM ${database}.orders_parsed
WHERE reject_reason != '';

-- Approximate distinct buyers per product, as uniqCombined states (HyperLogLog with 2^17
-- cells once a set outgrows its exact array and hash-table phases): a repeated order adds
-- nothing, and merging the states of every product gives the distinct buyers in total.
CREATE TABLE IF NOT EXISTS ${database}.sale_buyers_by_product
(
    product_id String,
    buyers AggregateFunction(uniqCombined, String)
)
ENGINE = AggregatingMergeTree
ORDER BY product_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.sale_buyers_by_product_mv
TO ${database}.sale_buyers_by_product
AS SELECT product_id, uniqCombinedState(buyer_id) AS buyers
FROM ${database}.orders
GROUP BY product_id;

-- The batch counts (0007) in one view: what the batch received, how much of it is valid (a
-- repeated event is valid too; the board counts it once) and how much was dead-lettered.
CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.orders_batches_mv
TO ${database}.ingest_batches
AS SELECT
    'sale' AS board,
    _batch_id,
    _source,
    min(_received_at) AS received_at,
    count() AS received,
    countIf(reject_reason = '') AS accepted,
    countIf(reject_reason != '') AS rejected
FROM ${database}.orders_parsed
GROUP BY _batch_id, _source;
