"""Publications run the SQL dbt compiles for each board (publish/plan.py): the same tables,
the same snapshots as `dbt run`, and a plan compiled again when the project changes."""

from __future__ import annotations

import re
import shutil
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import migrated_before
from test_registry import NOW, _events

from ingest.load import load_lines
from publish import dbt, plan
from publish.publisher import publish
from publish.scheduler import (
    Paced,
    events_arrived,
    job_id,
    next_cut,
    prune_job,
    start_scheduler,
    stop_scheduler,
)
from toplist.boards import BOARDS
from toplist.migrate import discover, migrate
from toplist.snapshots import current_snapshot

ROOT = Path(__file__).resolve().parent.parent


def built(client, config, board) -> dict[str, tuple]:
    """Each model table of the board's plan: its DDL (without its UUID) and its rows."""
    out = {}
    for step in plan.steps(config, board):
        ddl = client.command(f"SHOW CREATE TABLE {step.relation}")
        ddl = re.sub(r"UUID '[^']+'", "", ddl).replace("CREATE VIEW", "CREATE VIEW")
        rows = None
        if step.materialized == "table":
            rows = client.query(f"SELECT * FROM {step.relation} ORDER BY ALL").result_rows
        out[step.relation] = (ddl, rows)
    return out


@pytest.mark.parametrize("board", list(BOARDS))
def test_the_plan_builds_what_dbt_run_builds(client, config, board):
    spec = BOARDS[board]
    load_lines(client, config.database, _events(board), board=spec)
    for as_of in (NOW, NOW - timedelta(minutes=17, seconds=3)):
        dbt.invoke(
            config,
            [
                "run",
                "--select",
                f"+{spec.rankings} +{spec.summary}",
                "--vars",
                repr(dbt.dbt_vars(config, as_of)),
            ],  # fmt: skip
            quiet=True,
            reuse_parse=True,
        )
        through_dbt = built(client, config, spec)
        plan.run(client, config, spec, as_of)
        assert built(client, config, spec) == through_dbt, f"{board} at {as_of}"
    assert any(rows for _, rows in through_dbt.values()), f"{board}: nothing was ranked"
    snapshot = publish(client, config, NOW, board=board)
    assert snapshot.entry_count == len(
        client.query(f"SELECT * FROM {config.database}.{spec.rankings}").result_rows
    )


def test_the_charts_build_stops_rather_than_add_up_two_songs_or_leave_one_out(client, config):
    """The charts' windowed model groups by a song id's 64-bit hash (macros/keys.sql) and maps
    each key back to its id from the all-time totals at the end. Were two ids to share a key,
    their listens would add up as one song's; were a song missing from the totals, its listens
    would be left out. Either way the build stops with the reason and the table stays as it
    was. (No two ids sharing a key can be found to order: the plan's SQL is run with every song
    on one key.)"""
    spec = BOARDS["charts"]
    load_lines(client, config.database, _events("charts"), board=spec)
    plan.run(client, config, spec, NOW)
    table = f"{config.database}.int_listens__windowed"
    before = client.query(f"SELECT * FROM {table} ORDER BY ALL").result_rows
    assert len({row[2] for row in before}) > 1, "the events should hold more than one song"
    windowed = next(
        s for s in plan.steps(config, spec) if s.relation.endswith("`int_listens__windowed`")
    )
    moment = NOW.strftime(dbt.AS_OF_FORMAT)
    assert windowed.sql.count("cityHash64(song_id)") == 2  # the keys grouped by, and the map back
    one_key = replace(
        windowed, sql=windowed.sql.replace("cityHash64(song_id)", "(cityHash64(song_id) % 1)")
    )
    with pytest.raises(Exception, match="two song ids share one 64-bit song key"):
        client.command(one_key.statement(moment))
    assert client.query(f"SELECT * FROM {table} ORDER BY ALL").result_rows == before

    client.command(
        f"ALTER TABLE {config.database}.listens_total DELETE WHERE song_id = {{song:String}}",
        parameters={"song": before[0][2]},
        settings={"mutations_sync": 1},
    )
    with pytest.raises(Exception, match="listens of a song the all-time totals do not hold"):
        client.command(windowed.statement(moment))
    assert client.query(f"SELECT * FROM {table} ORDER BY ALL").result_rows == before


def test_a_changed_model_compiles_a_new_plan_and_a_kept_one_needs_no_dbt(
    client, config, tmp_path, monkeypatch
):
    project = tmp_path / "project"
    project.mkdir()
    for part in ("dbt_project.yml", "models", "macros", "dbt_project"):
        source = ROOT / part
        copy = shutil.copytree if source.is_dir() else shutil.copy
        copy(source, project / part)
    config = replace(config, dbt_project_dir=project, dbt_profiles_dir=project / "dbt_project")
    spec = BOARDS["sale"]
    first = plan.steps(config, spec)
    kept = list((project / "target" / "toplist-plans").glob("sale-*.json"))
    assert len(kept) == 1

    # A new process finds the kept plan and runs it without compiling (without dbt at all).
    plan._plans.clear()

    def no_dbt(*_args, **_kwargs):
        raise AssertionError("compiled again although nothing changed")

    monkeypatch.setattr(plan, "compile_plan", no_dbt)
    assert plan.steps(config, spec) == first
    monkeypatch.undo()

    model = project / "models" / "boards" / "sale" / "sale_rankings.sql"
    model.write_text(model.read_text().replace("select", "select /* changed */", 1))
    changed = plan.steps(config, spec)
    assert changed != first and any("/* changed */" in step.sql for step in changed)
    assert list((project / "target" / "toplist-plans").glob("sale-*.json")) != kept, (
        "the plan of the old project was kept beside the new one"
    )


def test_old_snapshots_go_a_quarter_of_the_retention_at_a_time(client, config):
    """The newest TOPLIST_SNAPSHOT_RETENTION snapshots always stay; older ones are deleted in
    batches, entries with their registry row."""
    config = replace(config, snapshot_retention=8)
    load_lines(client, config.database, _events("sale"), board=BOARDS["sale"])
    published, kept = [], []
    for _ in range(13):
        published.append(publish(client, config, board="sale").snapshot_id)
        rows = client.query(
            f"SELECT snapshot_id FROM {config.database}.board_snapshots WHERE board = 'sale'"
        ).result_rows
        kept.append({snapshot_id for (snapshot_id,) in rows})
        assert set(published[-8:]) <= kept[-1], "a snapshot within the retention was deleted"
        assert len(kept[-1]) < 8 + 2, "more than a quarter of the retention beyond it"
    assert [len(ids) for ids in kept] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 8, 9, 8, 9]
    entries = client.query(
        f"SELECT DISTINCT snapshot_id FROM {config.database}.board_entries WHERE board = 'sale'"
    ).result_rows
    assert {snapshot_id for (snapshot_id,) in entries} == kept[-1], "entries outlived their row"
    assert _partitions(client, config.database, "sale") == kept[-1], "a pruned snapshot's disk"


def _partitions(client, database: str, board: str) -> set[str]:
    """The snapshots of `board` that parts of board_entries hold rows of (sql/0033: one
    partition per snapshot, so a dropped snapshot leaves no part behind)."""
    rows = client.query(
        "SELECT DISTINCT partition FROM system.parts"
        " WHERE database = {db:String} AND table = 'board_entries' AND active",
        parameters={"db": database},
    ).result_rows
    prefix = f"('{board}','"
    return {p[len(prefix) : -2] for (p,) in rows if p.startswith(prefix)}


@pytest.mark.parametrize("board", list(BOARDS))
def test_snapshots_published_before_0033_are_served_on_and_pruned_after(tmp_path, board):
    """A database published into before each snapshot had a partition of its own (sql/0033)
    serves the same snapshot with the same entries after the upgrade, and its old snapshots'
    entries go with the next prune (every board)."""
    with migrated_before(33, tmp_path) as (client, config):
        config = replace(config, snapshot_retention=4)
        db = config.database
        load_lines(client, db, _events(board), board=BOARDS[board])
        old = [publish(client, config, board=board).snapshot_id for _ in range(3)]

        def entries() -> list[tuple]:
            return client.query(
                f"SELECT * FROM {db}.board_entries WHERE board = {{board:String}} ORDER BY ALL",
                parameters={"board": board},
            ).result_rows

        before = entries()
        assert before and {row[1] for row in before} == set(old)
        assert [m.version for m in migrate(client, config)] == [
            m.version for m in discover() if m.version >= 33
        ]
        assert entries() == before
        assert current_snapshot(client, db, board).snapshot_id == old[-1]
        assert _partitions(client, db, board) == set(old)
        new = [publish(client, config, board=board).snapshot_id for _ in range(3)]
        kept = client.query(
            f"SELECT snapshot_id FROM {db}.board_snapshots WHERE board = {{board:String}}",
            parameters={"board": board},
        ).result_rows
        assert {snapshot_id for (snapshot_id,) in kept} == set((old + new)[-4:])
        assert _partitions(client, db, board) == set((old + new)[-4:])


@pytest.mark.parametrize("board", list(BOARDS))
def test_a_scheduled_board_leaves_its_old_snapshots_to_the_prune_job(client, config, board):
    """Deleting registry rows is a mutation, which a board published every second would wait
    for before its next run: the scheduler's runs leave the old snapshots to its prune job,
    which keeps the same retention (every board)."""
    config = replace(config, snapshot_retention=4)
    load_lines(client, config.database, _events(board), board=BOARDS[board])
    job = Paced(config, board, None)
    for _ in range(7):
        assert job() is not None
        job.ended = job.lasted = 0.0  # no pacing between these runs

    def kept() -> int:
        return int(
            client.command(
                f"SELECT count() FROM {config.database}.board_snapshots"
                " WHERE board = {board:String}",
                parameters={"board": board},
            )
        )

    assert kept() == 7, "a scheduled run deleted old snapshots itself"
    prune_job(config, [board])
    assert kept() == 4


def test_a_scheduled_board_spends_at_most_half_the_time_publishing(client, config):
    """A run due sooner after the last one ended than that one lasted is skipped."""
    load_lines(client, config.database, _events("sale"), board=BOARDS["sale"])
    job = Paced(config, "sale", None)
    first = job()
    assert first is not None
    assert job() is None, "published again at once, as a board slower than its refresh would"
    time.sleep(job.lasted)
    second = job()
    assert second is not None and second.snapshot_id != first.snapshot_id


@pytest.mark.parametrize("board", list(BOARDS))
def test_new_events_publish_a_live_board_at_once_and_the_others_on_their_refresh(
    client, config, board
):
    """The flash sale must move within a second or two of an order: a batch written starts a
    publication of a board that publishes on arrival, even an hour before its refresh, and
    one written while that publication runs starts another after it (the first may have cut
    its as_of before the batch was in). The other boards keep to their refresh."""
    spec = BOARDS[board]
    config = replace(config, **{spec.refresh_setting: 3600})
    load_lines(client, config.database, _events(board), board=spec)
    published: list[str] = []
    scheduler = start_scheduler(
        config, lambda _board, snapshot, _error: published.append(snapshot), run_now=False,
        boards=[board],
    )  # fmt: skip
    try:
        paced = scheduler.get_job(job_id(board)).func
        events_arrived(scheduler, board)
        if not spec.publish_on_arrival:
            time.sleep(3)
            assert published == [], f"{board} was published before its refresh"
            return
        deadline = time.monotonic() + 30
        while not paced._running and not published and time.monotonic() < deadline:
            time.sleep(0.002)
        events_arrived(scheduler, board)  # a batch written while it runs (or just after)
        while len(published) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(published) == 2 and all(published), published
    finally:
        stop_scheduler(scheduler)


@pytest.mark.parametrize("board", list(BOARDS))
def test_a_board_is_cut_on_the_step_its_schedule_follows(client, config, board):
    """A snapshot's as_of is cut down to its board's step (`Board.as_of_step`, which the
    scheduler keeps its runs after), or taken to the millisecond on a board without one."""
    spec = BOARDS[board]
    moment = NOW + timedelta(minutes=7, seconds=12, microseconds=345_678)
    snapshot = publish(client, config, board=board, as_of=moment)
    if spec.as_of_step:
        epoch = int(moment.timestamp())
        expected = datetime.fromtimestamp(epoch - epoch % spec.as_of_step, UTC)
    else:
        expected = moment.replace(microsecond=345_000)
    assert snapshot.as_of == expected


def test_a_board_cut_on_a_step_is_published_just_after_each_cut(client, config):
    """The shelves are cut every 10 seconds: after a run, the next is due a batch's time and a
    second after a multiple of their refresh, not at the phase the process started with."""
    assert [next_cut(t, 10, 3) for t in (1000.0, 1003.0, 1003.5, 1012.9)] == [
        1003.0, 1003.0, 1013.0, 1013.0
    ]  # fmt: skip
    assert next_cut(1_000_000.0, 600, 3) == 1_000_203.0
    config = replace(config, popular_refresh_seconds=10)
    load_lines(client, config.database, _events("popular"), board=BOARDS["popular"])
    scheduler = start_scheduler(config, run_now=False, boards=["popular"])
    try:
        paced = scheduler.get_job(job_id("popular")).func
        assert paced() is not None
        due = scheduler.get_job(job_id("popular")).next_run_time.timestamp()
        lag = config.batch_seconds("popular") + 1
        assert due > time.time()
        assert abs((due - lag) / 10 - round((due - lag) / 10)) < 1e-3, due
    finally:
        stop_scheduler(scheduler)


def test_stopping_the_scheduler_waits_for_a_run_under_way_and_returns(client, config):
    """A stop (SIGTERM, Ctrl-C) while a stepped board is being published: the run finishes and
    the scheduler stops, rather than the run's end waiting on the shutdown for good."""
    load_lines(client, config.database, _events("popular"), board=BOARDS["popular"])
    scheduler = start_scheduler(config, boards=["popular"])  # runs at once
    paced = scheduler.get_job(job_id("popular")).func
    deadline = time.monotonic() + 30
    while not paced._running and time.monotonic() < deadline:
        time.sleep(0.002)
    assert paced._running, "the first publication never started"
    stopping = threading.Thread(target=stop_scheduler, args=(scheduler,), daemon=True)
    stopping.start()
    stopping.join(60)
    assert not stopping.is_alive(), "the scheduler never stopped"
    assert not paced._running


def test_the_boards_published_on_a_refresh_yield_the_cores_to_the_live_ones(
    client, config, monkeypatch
):
    """The charts and the shelves rank more data and are due less often: their publications
    and batches run at a lower priority (a nice value, TOPLIST_BULK_THREAD_PRIORITY), and the
    live boards' at a higher one (TOPLIST_LIVE_THREAD_PRIORITY), so those go first on a busy
    machine; the engine holds the setting each one ran with."""
    from publish import scheduler

    ran_at = {}
    monkeypatch.setattr(
        scheduler,
        "publish",
        lambda engine, _config, board, **_: ran_at.setdefault(
            board, int(engine.command("SELECT getSetting('os_thread_priority')"))
        ),
    )
    for board in BOARDS:
        scheduler.publish_job(config, board)
    assert ran_at == {"charts": 10, "listeners": -5, "sale": -5, "popular": 10}
    ran_at.clear()
    scheduler.publish_job(replace(config, bulk_thread_priority=0), "charts")
    scheduler.publish_job(replace(config, live_thread_priority=0), "sale")
    assert ran_at == {"charts": 0, "sale": 0}


@pytest.mark.parametrize("board", list(BOARDS))
def test_a_live_boards_short_batch_goes_first_and_a_big_one_does_not(client, config, board):
    """A live board's consumer batch (half a second: one part) is applied above the rest, at
    TOPLIST_LIVE_THREAD_PRIORITY; a batch big enough to be split (a load, a backlog) runs at 0
    at most, so it never holds the cores above the API and the merges. The charts' and
    shelves' run at TOPLIST_BULK_THREAD_PRIORITY either way."""
    from ingest import load
    from toplist.engine import connect

    spec, lines = BOARDS[board], _events(board)[:40]
    applied_at: list[int] = []
    lanes = load.lanes

    class Recording:
        def __init__(self, lane):
            self.lane = lane

        def command(self, statement, **kwargs):
            applied_at.append(int(re.search(r"os_thread_priority = (-?\d+)", statement)[1]))
            return self.lane.command(statement, **kwargs)

    def load_in_parts_of(rows: int, part: list[str]) -> set[int]:
        applied_at.clear()
        engine = connect(replace(config, ingest_lane_rows=rows))
        try:
            load_lines(engine, config.database, part, board=spec)
        finally:
            engine.close()
        return set(applied_at)

    live = spec.publish_on_arrival
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(load, "lanes", lambda engine: [Recording(lane) for lane in lanes(engine)])
        assert load_in_parts_of(20_000, lines[:20]) == {-5 if live else 10}
        assert load_in_parts_of(5, lines[20:]) == {0 if live else 10}
