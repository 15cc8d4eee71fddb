-- Every source of listen events writes raw messages here: `toplist load`, the embedded Kafka
-- consumer, and in server mode the Kafka engine's materialized view. Parsing and validation
-- happen once, behind this table, so every source gets the same rules.
-- Null engine: the raw events and the dead letters below keep what matters.
CREATE TABLE IF NOT EXISTS ${database}.listens_incoming
(
    raw_message String,
    _topic LowCardinality(String) DEFAULT '',
    _partition Int32 DEFAULT -1,
    _offset Int64 DEFAULT -1,
    _timestamp Nullable(DateTime64(3, 'UTC')),
    _source LowCardinality(String) DEFAULT 'load',
    _batch_id UUID DEFAULT generateUUIDv4(),
    _received_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = Null;
