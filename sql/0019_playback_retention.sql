-- Live listeners' state, bounded (TOPLIST_LISTENERS_RETENTION_HOURS, default 24; 0 keeps it
-- all). `playbacks` (0015) held one row per playback for good, so every publication, every
-- few seconds, merged every playback ever reported. Now each row also has the hour of its
-- reports' event_time: a playback's states are kept per hour it was reported in, and a
-- publication merges only the hours of the retention (models/staging/toplist/
-- stg_toplist__playbacks.sql: the current hour and the retention's hours before it), so a
-- report older than that no longer counts, whenever it arrived. `toplist migrate` gives the
-- table the TTL that drops those hours (toplist/migrate.py), so what a publication reads stays
-- the size of the retention.
--
-- The hour sits where the view's query has it (a rebuild, toplist/corrections.py, inserts
-- that query's columns in order) and at the end of the sorting key, so the rows of one
-- playback and hour still merge into one. Rows written before this migration have no hour (1970): the reports they
-- came from are aggregated again below, with their hours, and the old rows fall out of the
-- retention (max and argMax states are the same however often a report is aggregated).
ALTER TABLE ${database}.playbacks
    ADD COLUMN IF NOT EXISTS hour DateTime('UTC') AFTER playback_id,
    MODIFY ORDER BY (user_id, playback_id, hour);

ALTER TABLE ${database}.playbacks_mv MODIFY QUERY
SELECT
    user_id,
    playback_id,
    toStartOfHour(toDateTime(event_time, 'UTC')) AS hour,
    maxState(tuple(if(type = 'HEARTBEAT', toUInt64(0), version), toUInt8(type = 'STOP'))) AS state,
    argMaxState(
        if(type = 'START', song_id, ''),
        tuple(toUInt8(type = 'START'), version, event_time, song_id)
    ) AS song_id,
    maxState(if(type = 'START', event_time, toDateTime64(0, 3, 'UTC'))) AS started_at,
    maxState(event_time) AS last_seen
FROM ${database}.playback_reports
GROUP BY user_id, playback_id, hour;

INSERT INTO ${database}.playbacks (user_id, playback_id, hour, state, song_id, started_at, last_seen)
SELECT
    user_id,
    playback_id,
    toStartOfHour(toDateTime(event_time, 'UTC')) AS hour,
    maxState(tuple(if(type = 'HEARTBEAT', toUInt64(0), version), toUInt8(type = 'STOP'))),
    argMaxState(
        if(type = 'START', song_id, ''),
        tuple(toUInt8(type = 'START'), version, event_time, song_id)
    ),
    maxState(if(type = 'START', event_time, toDateTime64(0, 3, 'UTC'))),
    maxState(event_time)
FROM ${database}.playback_reports
GROUP BY user_id, playback_id, hour;
