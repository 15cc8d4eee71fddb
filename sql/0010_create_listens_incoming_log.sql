-- The unit of atomicity for Toplist's own writers (`toplist load`, the embedded consumer).
-- One insert runs the whole chain behind listens_incoming (raw, ids, aggregates, dead
-- letters, batch counts), and ClickHouse commits each table of that chain on its own, so a
-- process killed in the middle of it can leave a batch half applied: counted in the
-- aggregates but not in `listens`, say. So a writer first stores the batch here (one part, all
-- or nothing), then runs the chain from it (INSERT ... SELECT), then records it in
-- listens_incoming_done. A batch stored here and not recorded as done was cut off; the next
-- writer undoes what it left and applies it again (ingest/load.py, repair_unfinished).
-- The stored messages double as the audit and replay log, kept ${incoming_log_days} days.
CREATE TABLE IF NOT EXISTS ${database}.listens_incoming_log
(
    raw_message String,
    _topic LowCardinality(String) DEFAULT '',
    _partition Int32 DEFAULT -1,
    _offset Int64 DEFAULT -1,
    _timestamp Nullable(DateTime64(3, 'UTC')),
    _source LowCardinality(String) DEFAULT 'load',
    _batch_id UUID,
    _received_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = MergeTree
PARTITION BY toYYYYMMDD(_received_at)
ORDER BY _batch_id
TTL toDateTime(_received_at) + INTERVAL ${incoming_log_days} DAY
SETTINGS ttl_only_drop_parts = 1;

-- One row per applied batch and partition; next_offset is where a consumer resumes, so a
-- batch applied but not yet committed to Kafka is not applied (or dead-lettered) twice.
CREATE TABLE IF NOT EXISTS ${database}.listens_incoming_done
(
    _batch_id UUID,
    _topic LowCardinality(String),
    _partition Int32,
    next_offset Int64,
    repaired Bool DEFAULT false,
    done_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = MergeTree
ORDER BY (_topic, _partition, _batch_id)
TTL toDateTime(done_at) + INTERVAL ${incoming_log_days} DAY;
