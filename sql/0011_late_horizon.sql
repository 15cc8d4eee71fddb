-- The late-event horizon (TOPLIST_LATE_HORIZON_SECONDS, default 0: no horizon). An event that
-- arrives more than the horizon after its event_time is kept in `listens` for audit, flagged
-- `beyond_horizon`, and never counted. The flag is decided once, on arrival, from the event's
-- own _received_at, so a rebuild from raw reproduces exactly what was counted incrementally,
-- whatever the horizon is later set to. Any other late event (older than the last as_of) is
-- counted in its bucket and so in every window that contains its event_time.
-- `settings` holds the values the SQL reads at insert time; `toplist migrate` (which every
-- command runs first) writes them from the configuration (toplist/migrate.py).
CREATE TABLE IF NOT EXISTS ${database}.settings
(
    name String,
    value Int64
)
ENGINE = EmbeddedRocksDB
PRIMARY KEY name;

ALTER TABLE ${database}.listens
    ADD COLUMN IF NOT EXISTS beyond_horizon Bool DEFAULT false AFTER event_time;

ALTER TABLE ${database}.listen_voids
    ADD COLUMN IF NOT EXISTS beyond_horizon Bool DEFAULT false AFTER event_time;

ALTER TABLE ${database}.ingest_batches
    ADD COLUMN IF NOT EXISTS beyond_horizon SimpleAggregateFunction(sum, UInt64) DEFAULT 0;

-- listens_mv as in 0004, plus the flag. MODIFY QUERY swaps the query in one step, so no
-- insert runs without a view.
ALTER TABLE ${database}.listens_mv MODIFY QUERY
SELECT
    fresh.event_id AS event_id,
    fresh.song_id AS song_id,
    fresh.user_id AS user_id,
    fresh.country AS country,
    fresh.event_time AS event_time,
    fresh.beyond_horizon AS beyond_horizon,
    fresh._topic AS _topic,
    fresh._partition AS _partition,
    fresh._offset AS _offset,
    fresh._timestamp AS _timestamp,
    fresh._source AS _source,
    fresh._batch_id AS _batch_id,
    fresh._received_at AS _received_at
FROM
(
    SELECT
        event_id,
        song_id,
        user_id,
        country,
        assumeNotNull(event_time) AS event_time,
        horizon_seconds > 0
            AND assumeNotNull(event_time) < _received_at - toIntervalSecond(horizon_seconds)
            AS beyond_horizon,
        _topic,
        _partition,
        _offset,
        _timestamp,
        _source,
        _batch_id,
        _received_at
    FROM ${database}.listens_parsed
    CROSS JOIN (
        SELECT ifNull(max(value), 0) AS horizon_seconds
        FROM ${database}.settings WHERE name = 'late_horizon_seconds'
    ) AS horizon
    WHERE reject_reason = ''
    LIMIT 1 BY event_id
) AS fresh
LEFT ANTI JOIN ${database}.listen_ids AS seen ON fresh.event_id = seen.event_id
SETTINGS join_algorithm = 'direct';

ALTER TABLE ${database}.listens_by_10m_mv MODIFY QUERY
SELECT
    toplist_bucket_start(event_time) AS bucket_start,
    country,
    song_id,
    sumState(toInt64(1)) AS listens
FROM ${database}.listens
WHERE NOT beyond_horizon
GROUP BY bucket_start, country, song_id;

ALTER TABLE ${database}.listen_voids_by_10m_mv MODIFY QUERY
SELECT
    toplist_bucket_start(event_time) AS bucket_start,
    country,
    song_id,
    sumState(toInt64(-1)) AS listens
FROM ${database}.listen_voids
WHERE NOT beyond_horizon
GROUP BY bucket_start, country, song_id;

ALTER TABLE ${database}.ingest_batches_accepted_mv MODIFY QUERY
SELECT
    _batch_id,
    _source,
    min(_received_at) AS received_at,
    toUInt64(0) AS received,
    count() AS accepted,
    toUInt64(0) AS rejected,
    countIf(beyond_horizon) AS beyond_horizon
FROM ${database}.listens
GROUP BY _batch_id, _source;
