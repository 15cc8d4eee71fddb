-- One snapshot registry for every board (DESIGN.md "Boards are data"): the charts publish
-- into board_entries / board_snapshots (0014) like the other boards, so there is one snapshot
-- type, one publish path and one cache. A chart entry is stored as scope, metric 'listens',
-- window, rank, item_id (the song) and score (its listens), under the policy it was ranked
-- with; the registry row records the policies a snapshot holds and the voids it reflects.
ALTER TABLE ${database}.board_entries
    ADD COLUMN IF NOT EXISTS policy LowCardinality(String) DEFAULT 'v1' AFTER snapshot_id;

ALTER TABLE ${database}.board_snapshots
    ADD COLUMN IF NOT EXISTS policies Array(LowCardinality(String)) DEFAULT [policy],
    ADD COLUMN IF NOT EXISTS void_count UInt64 DEFAULT 0;

-- The charts' snapshots so far, moved over whole (entries first, registry rows last), so the
-- current snapshot is served on without a new publication.
INSERT INTO ${database}.board_entries
    (board, snapshot_id, policy, scope, metric, window_name, rank, item_id, score, extra)
SELECT 'charts', snapshot_id, policy, scope, 'listens', window_name, rank, song_id, listens, map()
FROM ${database}.chart_entries;

INSERT INTO ${database}.board_snapshots
    (board, snapshot_id, as_of, policy, published_at, entry_count, keep_top, duration_ms, stats,
     policies, void_count)
SELECT 'charts', snapshot_id, as_of, policy, published_at, entry_count, keep_top, duration_ms,
    map(), policies, void_count
FROM ${database}.chart_snapshots;

-- Nothing writes them any more: a reader left on them would read a snapshot that never moves.
DROP TABLE IF EXISTS ${database}.chart_entries;
DROP TABLE IF EXISTS ${database}.chart_snapshots;

-- Publication is a stage of its own, and two publishers of one board never interleave, across
-- processes too: a publisher holds the board's lease while it publishes (publish/lease.py).
-- A lease is a term number per board; claiming term N inserts a row with the deduplication
-- token '<board>/<N>', and ClickHouse keeps only the first insert of a token, so of two
-- publishers claiming the same term exactly one finds its own row there. A release is a
-- second row of the term.
CREATE TABLE IF NOT EXISTS ${database}.publication_leases
(
    board LowCardinality(String),
    term UInt64,
    kind LowCardinality(String),
    holder String,
    at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = MergeTree
ORDER BY (board, term, kind)
TTL toDateTime(at) + INTERVAL 7 DAY
SETTINGS non_replicated_deduplication_window = 10000;

-- What asked for a publication and when (a correction with "publish": true): the publisher
-- publishes the board as soon as it sees a request newer than the board's last publication.
CREATE TABLE IF NOT EXISTS ${database}.publication_requests
(
    board LowCardinality(String),
    requested_at DateTime64(3, 'UTC') DEFAULT now64(3),
    reason String
)
ENGINE = MergeTree
ORDER BY (board, requested_at)
TTL toDateTime(requested_at) + INTERVAL 7 DAY;
