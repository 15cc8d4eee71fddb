-- A snapshot ranks with every published policy at once (TOPLIST_POLICIES), so a request can
-- choose one (?policy=) from the same snapshot. Entries carry the policy they were ranked
-- with; entries written before this migration were ranked with v1, hence the default.
-- The registry records the policies a snapshot holds and how many voided events it reflects.
ALTER TABLE ${database}.chart_entries
    ADD COLUMN IF NOT EXISTS policy LowCardinality(String) DEFAULT 'v1' AFTER snapshot_id;

ALTER TABLE ${database}.chart_snapshots
    ADD COLUMN IF NOT EXISTS policies Array(LowCardinality(String)) DEFAULT [policy];

ALTER TABLE ${database}.chart_snapshots
    ADD COLUMN IF NOT EXISTS void_count UInt64 DEFAULT 0;
