"""The publication stage: rank each board with dbt and publish its snapshots (publisher.py),
on a schedule (scheduler.py), one publisher per board at a time (lease.py)."""
