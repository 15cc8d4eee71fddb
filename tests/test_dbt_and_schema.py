"""dbt on the embedded engine, and the migration runner."""

from __future__ import annotations

import ast
import os
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from ingest.generator import ListenGenerator
from ingest.load import load_lines
from publish import dbt
from publish.publisher import publish
from toplist.config import (
    POPULAR_WINDOW_SECONDS,
    PROJECT_ROOT,
    SCORINGS,
    WINDOW_SECONDS,
    Config,
)
from toplist.migrate import MigrationError, applied, discover, dump_schema, migrate


def test_dbt_build_passes_models_data_tests_and_unit_tests_on_the_embedded_engine(client, config):
    as_of = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    batch = ListenGenerator(seed=5).batch(2_000, as_of - timedelta(days=8), as_of)
    load_lines(client, config.database, batch.lines)
    result = dbt.invoke(config, ["build", "--vars", "{as_of: '2026-12-01T12:00:00Z'}"])
    kinds = {}
    for node_result in result.results:
        kinds.setdefault(node_result.node.resource_type, []).append(str(node_result.status))
    assert set(kinds) >= {"model", "test", "unit_test"}, f"dbt build ran only {set(kinds)}"
    assert len(kinds["unit_test"]) >= 6, "window bounds, tie-break, cutoff, fewer-than-k, ties"
    unit_tests = {r.node.name for r in result.results if r.node.resource_type == "unit_test"}
    assert {
        "v1_is_unchanged_beside_v1_ties",
        "v1_ties_shares_ranks_and_skips_after_a_tie",
        "shelves_are_scored_by_each_scoring_version",
        "sale_boards_rank_only_what_can_make_the_cut",
    } <= unit_tests, f"the policy and scoring unit tests did not run: {sorted(unit_tests)}"
    failed = [
        status
        for statuses in kinds.values()
        for status in statuses
        if status not in ("success", "pass")
    ]
    assert not failed, f"dbt build reported {failed}"
    # The models were built by the in-process chDB engine, in this test's database.
    assert client.command(f"SELECT count() FROM {config.database}.chart_rankings") > 0


def test_dbt_reports_a_failing_build_as_an_error(client, config):
    client.command(f"DROP TABLE {config.database}.listens_by_10m")
    with pytest.raises(dbt.DbtError, match="listens_by_10m"):
        dbt.invoke(config, ["run", "--select", "stg_toplist__listen_buckets"], quiet=True)


def test_a_reused_parse_still_ranks_each_publication_at_its_own_as_of(client, config):
    as_of = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    batch = ListenGenerator(seed=6).batch(1_000, as_of - timedelta(hours=3), as_of)
    load_lines(client, config.database, batch.lines)
    first = publish(client, config, as_of - timedelta(hours=2))
    second = publish(client, config, as_of)
    assert (first.as_of, second.as_of) == (as_of - timedelta(hours=2), as_of)
    assert first.entry_count < second.entry_count, "the second ranking saw the first's as_of"


def test_the_parse_is_kept_and_redone_when_a_project_file_changes(config):
    model = PROJECT_ROOT / "models" / "marts" / "chart_rankings.sql"
    parsed = dbt._parsed_manifest(config, quiet=True)
    assert dbt._parsed_manifest(config, quiet=True) is parsed, "the parse was not kept"
    stat = model.stat()
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    try:
        edited = dbt._parsed_manifest(config, quiet=True)
        assert edited is not parsed, "an edited model would keep its old parse"
    finally:
        os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_migrations_are_idempotent_and_recorded(client, config):
    assert migrate(client, config) == [], "a second run must apply nothing"
    wanted = [m.version for m in discover() if m.wanted(config)]
    assert sorted(applied(client, config.database)) == wanted


def test_an_edited_applied_migration_is_refused(client, config, tmp_path):
    for migration in discover():
        (tmp_path / migration.path.name).write_text(migration.text)
    first = sorted(tmp_path.glob("*.sql"))[0]
    first.write_text(first.read_text() + "\n-- edited\n")
    with pytest.raises(MigrationError, match="changed after it was applied"):
        migrate(client, config, sql_dir=tmp_path)


@pytest.mark.embedded_only  # the committed dump is the embedded engine's SHOW CREATE text
def test_schema_dump_is_up_to_date(client, config):
    # The dump is of the default configuration (the tests keep listeners' state for good).
    migrate(client, replace(config, listeners_retention_hours=Config.listeners_retention_hours))
    committed = (PROJECT_ROOT / "sql" / "schema.sql").read_text()
    assert dump_schema(client, config.database) == committed, (
        "sql/schema.sql is out of date: run `toplist migrate --dump-schema sql/schema.sql`"
    )


def test_the_api_knows_the_windows_the_models_rank():
    """The windows' names and lengths the API reads (toplist/config.py, for ?window= and a
    song's series) are the ones macros/windows.sql ranks with."""
    macro = (PROJECT_ROOT / "macros" / "windows.sql").read_text()
    body = re.search(r"macro chart_windows\(\).*?return\((\{.*?\})\)", macro, re.S)
    assert body, "chart_windows() no longer returns a dict literal"
    assert ast.literal_eval(body.group(1).replace("none", "None")) == WINDOW_SECONDS
    body = re.search(r"macro popular_windows\(\).*?return\((\{.*?\})\)", macro, re.S)
    assert body, "popular_windows() no longer returns a dict literal"
    assert ast.literal_eval(body.group(1)) == POPULAR_WINDOW_SECONDS
    scoring = (PROJECT_ROOT / "macros" / "scoring.sql").read_text()
    body = re.search(r"macro shelf_scorings\(\).*?return\((\{.*?\})\)", scoring, re.S)
    assert body, "shelf_scorings() no longer returns a dict literal"
    assert tuple(ast.literal_eval(body.group(1))) == SCORINGS
