-- Conflicting copies (DESIGN.md "Rules every board shares"): where an event counts once per
-- event_id and the first copy wins (0004, 0020), a later copy with *different content* is
-- still dropped, but now counted, per batch, in ingest_batches.conflicts (/metrics:
-- toplist_ingest_conflicting_copies_total). A copy conflicts when its content fingerprint
-- (toplist_<prefix>_print of its fields) differs from that of the copy that counted.
--
-- To know the counted copy's content, each id set keeps the fingerprint of its event
-- (EmbeddedRocksDB takes no new column: the set is rebuilt from the raw table and renamed).
-- The check against the id set moves into its own step, `<prefix>_checked` (Null): every
-- valid event with its fingerprint and what the id set held for it *before* this insert.
-- Both views below it read that one answer, so neither depends on the order ClickHouse runs
-- sibling views in: `<raw>_mv` passes the first copy of each new id (as before), and
-- `<prefix>_conflicts_mv` counts the copies whose fingerprint differs from the counted copy's
-- (the one stored before, or else the first in the insert: the one `<raw>_mv` passes).
-- The three boards' text below came from one template; run no ingest while this applies.

ALTER TABLE ${database}.ingest_batches
    ADD COLUMN IF NOT EXISTS conflicts SimpleAggregateFunction(sum, UInt64) DEFAULT 0;

-- charts: listens (song_id, user_id, country, event_time).
CREATE FUNCTION IF NOT EXISTS toplist_listens_print AS (song_id, user_id, country, event_time) ->
    cityHash64(song_id, user_id, country, event_time);

DROP TABLE ${database}.listen_ids_mv;

CREATE TABLE IF NOT EXISTS ${database}.listen_ids_next
(
    event_id String,
    fingerprint UInt64
)
ENGINE = EmbeddedRocksDB
PRIMARY KEY event_id;

INSERT INTO ${database}.listen_ids_next (event_id, fingerprint)
SELECT event_id, toplist_listens_print(song_id, user_id, country, event_time) FROM ${database}.listens;

DROP TABLE ${database}.listen_ids;

RENAME TABLE ${database}.listen_ids_next TO ${database}.listen_ids;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.listen_ids_mv
TO ${database}.listen_ids
AS SELECT event_id, toplist_listens_print(song_id, user_id, country, event_time) AS fingerprint
FROM ${database}.listens;

CREATE TABLE IF NOT EXISTS ${database}.listens_checked
(
    event_id String,
    song_id String,
    user_id String,
    country LowCardinality(String),
    event_time DateTime64(3, 'UTC'),
    beyond_horizon Bool,
    _topic LowCardinality(String),
    _partition Int32,
    _offset Int64,
    _timestamp Nullable(DateTime64(3, 'UTC')),
    _source LowCardinality(String),
    _batch_id UUID,
    _received_at DateTime64(3, 'UTC'),
    fingerprint UInt64,
    accepted_before Bool,
    accepted_print UInt64
)
ENGINE = Null;

DROP TABLE ${database}.listens_mv;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.listens_checked_mv
TO ${database}.listens_checked
AS SELECT
    fresh.*,
    seen.event_id != '' AS accepted_before,
    seen.fingerprint AS accepted_print
FROM
(
    SELECT
        event_id, song_id, user_id, country,
        assumeNotNull(event_time) AS event_time,
        horizon_seconds > 0
            AND assumeNotNull(event_time) < _received_at - toIntervalSecond(horizon_seconds)
            AS beyond_horizon,
        _topic, _partition, _offset, _timestamp, _source, _batch_id, _received_at,
        toplist_listens_print(song_id, user_id, country, assumeNotNull(event_time)) AS fingerprint
    FROM ${database}.listens_parsed
    CROSS JOIN (
        SELECT ifNull(max(value), 0) AS horizon_seconds
        FROM ${database}.settings WHERE name = 'late_horizon_seconds'
    ) AS horizon
    WHERE reject_reason = ''
) AS fresh
LEFT JOIN ${database}.listen_ids AS seen ON fresh.event_id = seen.event_id
SETTINGS join_algorithm = 'direct';

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.listens_mv
TO ${database}.listens
AS SELECT * EXCEPT (fingerprint, accepted_before, accepted_print)
FROM ${database}.listens_checked
WHERE NOT accepted_before
LIMIT 1 BY event_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.listens_conflicts_mv
TO ${database}.ingest_batches
AS SELECT
    'charts' AS board,
    _batch_id,
    _source,
    min(received_at) AS received_at,
    sum(later_copies) AS conflicts
FROM
(
    SELECT
        any(_batch_id) AS _batch_id,
        any(_source) AS _source,
        min(_received_at) AS received_at,
        groupArray(fingerprint) AS prints,
        any(accepted_before) AS counted_before,
        if(counted_before, any(accepted_print), prints[1]) AS counted_print,
        arrayCount(copy -> copy != counted_print, prints) AS later_copies
    FROM ${database}.listens_checked
    GROUP BY event_id
    HAVING later_copies > 0
)
GROUP BY _batch_id, _source;

-- sale: orders (order_id, product_id, buyer_id, units, amount_cents, event_time).
CREATE FUNCTION IF NOT EXISTS toplist_orders_print AS (order_id, product_id, buyer_id, units, amount_cents, event_time) ->
    cityHash64(order_id, product_id, buyer_id, units, amount_cents, event_time);

DROP TABLE ${database}.order_ids_mv;

CREATE TABLE IF NOT EXISTS ${database}.order_ids_next
(
    event_id String,
    fingerprint UInt64
)
ENGINE = EmbeddedRocksDB
PRIMARY KEY event_id;

INSERT INTO ${database}.order_ids_next (event_id, fingerprint)
SELECT event_id, toplist_orders_print(order_id, product_id, buyer_id, units, amount_cents, event_time) FROM ${database}.orders;

DROP TABLE ${database}.order_ids;

RENAME TABLE ${database}.order_ids_next TO ${database}.order_ids;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.order_ids_mv
TO ${database}.order_ids
AS SELECT event_id, toplist_orders_print(order_id, product_id, buyer_id, units, amount_cents, event_time) AS fingerprint
FROM ${database}.orders;

CREATE TABLE IF NOT EXISTS ${database}.orders_checked
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
    _received_at DateTime64(3, 'UTC'),
    fingerprint UInt64,
    accepted_before Bool,
    accepted_print UInt64
)
ENGINE = Null;

DROP TABLE ${database}.orders_mv;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.orders_checked_mv
TO ${database}.orders_checked
AS SELECT
    fresh.*,
    seen.event_id != '' AS accepted_before,
    seen.fingerprint AS accepted_print
FROM
(
    SELECT
        * EXCEPT (reject_reason, raw_message) REPLACE (assumeNotNull(event_time) AS event_time),
        toplist_orders_print(order_id, product_id, buyer_id, units, amount_cents, assumeNotNull(event_time)) AS fingerprint
    FROM ${database}.orders_parsed
    WHERE reject_reason = ''
) AS fresh
LEFT JOIN ${database}.order_ids AS seen ON fresh.event_id = seen.event_id
SETTINGS join_algorithm = 'direct';

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.orders_mv
TO ${database}.orders
AS SELECT * EXCEPT (fingerprint, accepted_before, accepted_print)
FROM ${database}.orders_checked
WHERE NOT accepted_before
LIMIT 1 BY event_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.orders_conflicts_mv
TO ${database}.ingest_batches
AS SELECT
    'sale' AS board,
    _batch_id,
    _source,
    min(received_at) AS received_at,
    sum(later_copies) AS conflicts
FROM
(
    SELECT
        any(_batch_id) AS _batch_id,
        any(_source) AS _source,
        min(_received_at) AS received_at,
        groupArray(fingerprint) AS prints,
        any(accepted_before) AS counted_before,
        if(counted_before, any(accepted_print), prints[1]) AS counted_print,
        arrayCount(copy -> copy != counted_print, prints) AS later_copies
    FROM ${database}.orders_checked
    GROUP BY event_id
    HAVING later_copies > 0
)
GROUP BY _batch_id, _source;

-- popular: item_events (item_id, restaurant_id, city_id, type, user_id, event_time).
CREATE FUNCTION IF NOT EXISTS toplist_item_events_print AS (item_id, restaurant_id, city_id, type, user_id, event_time) ->
    cityHash64(item_id, restaurant_id, city_id, type, user_id, event_time);

DROP TABLE ${database}.item_event_ids_mv;

CREATE TABLE IF NOT EXISTS ${database}.item_event_ids_next
(
    event_id String,
    fingerprint UInt64
)
ENGINE = EmbeddedRocksDB
PRIMARY KEY event_id;

INSERT INTO ${database}.item_event_ids_next (event_id, fingerprint)
SELECT event_id, toplist_item_events_print(item_id, restaurant_id, city_id, type, user_id, event_time) FROM ${database}.item_events;

DROP TABLE ${database}.item_event_ids;

RENAME TABLE ${database}.item_event_ids_next TO ${database}.item_event_ids;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.item_event_ids_mv
TO ${database}.item_event_ids
AS SELECT event_id, toplist_item_events_print(item_id, restaurant_id, city_id, type, user_id, event_time) AS fingerprint
FROM ${database}.item_events;

CREATE TABLE IF NOT EXISTS ${database}.item_events_checked
(
    event_id String,
    item_id String,
    restaurant_id String,
    city_id String,
    type LowCardinality(String),
    user_id String,
    event_time DateTime64(3, 'UTC'),
    _topic LowCardinality(String),
    _partition Int32,
    _offset Int64,
    _timestamp Nullable(DateTime64(3, 'UTC')),
    _source LowCardinality(String),
    _batch_id UUID,
    _received_at DateTime64(3, 'UTC'),
    fingerprint UInt64,
    accepted_before Bool,
    accepted_print UInt64
)
ENGINE = Null;

DROP TABLE ${database}.item_events_mv;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.item_events_checked_mv
TO ${database}.item_events_checked
AS SELECT
    fresh.*,
    seen.event_id != '' AS accepted_before,
    seen.fingerprint AS accepted_print
FROM
(
    SELECT
        * EXCEPT (reject_reason, raw_message) REPLACE (assumeNotNull(event_time) AS event_time),
        toplist_item_events_print(item_id, restaurant_id, city_id, type, user_id, assumeNotNull(event_time)) AS fingerprint
    FROM ${database}.item_events_parsed
    WHERE reject_reason = ''
) AS fresh
LEFT JOIN ${database}.item_event_ids AS seen ON fresh.event_id = seen.event_id
SETTINGS join_algorithm = 'direct';

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.item_events_mv
TO ${database}.item_events
AS SELECT * EXCEPT (fingerprint, accepted_before, accepted_print)
FROM ${database}.item_events_checked
WHERE NOT accepted_before
LIMIT 1 BY event_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${database}.item_events_conflicts_mv
TO ${database}.ingest_batches
AS SELECT
    'popular' AS board,
    _batch_id,
    _source,
    min(received_at) AS received_at,
    sum(later_copies) AS conflicts
FROM
(
    SELECT
        any(_batch_id) AS _batch_id,
        any(_source) AS _source,
        min(_received_at) AS received_at,
        groupArray(fingerprint) AS prints,
        any(accepted_before) AS counted_before,
        if(counted_before, any(accepted_print), prints[1]) AS counted_print,
        arrayCount(copy -> copy != counted_print, prints) AS later_copies
    FROM ${database}.item_events_checked
    GROUP BY event_id
    HAVING later_copies > 0
)
GROUP BY _batch_id, _source;
