-- Versioned scoring (issue 29): a shelf's score is defined by a scoring version
-- (macros/scoring.sql), as its order is by a tie policy. Each entry says the version it was
-- scored with, and each registry row the versions its snapshot holds; the API picks one per
-- request (?scoring_version=), TOPLIST_SCORING_VERSION names the default. The boards that
-- have no scoring versions hold 'v1' (their one score) everywhere.
ALTER TABLE ${database}.board_entries
    ADD COLUMN IF NOT EXISTS scoring LowCardinality(String) DEFAULT 'v1';

ALTER TABLE ${database}.board_snapshots
    ADD COLUMN IF NOT EXISTS scorings Array(LowCardinality(String)) DEFAULT ['v1'];

-- Internal jobs (POST /internal/rebuild; GET /internal/jobs/<id>): one row per change of a
-- job's state, the latest per job_id wins, so any process reads a job's progress and result.
CREATE TABLE IF NOT EXISTS ${database}.internal_jobs
(
    job_id String,
    kind LowCardinality(String),
    request String,
    state LowCardinality(String),
    done UInt32,
    total UInt32,
    result String,
    error String,
    created_at DateTime64(3, 'UTC'),
    updated_at DateTime64(6, 'UTC') DEFAULT now64(6)
)
ENGINE = ReplacingMergeTree(updated_at)
ORDER BY job_id
TTL toDateTime(updated_at) + INTERVAL 30 DAY;
