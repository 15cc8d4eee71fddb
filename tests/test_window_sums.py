"""The charts' window sums are kept between publications and moved to each new as_of
(models/intermediate/int_listens__windowed.sql, publish/plan.py "Moving"): after every move
they equal the Python reference's, through new events, late ones, voids, a crash repair, a
rebuild, midnight, and a move cut off half way."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from reference import boards

from ingest.generator import ListenGenerator
from ingest.load import load_lines
from publish.publisher import publish
from toplist.corrections import rebuild_aggregates, recount_buckets, void_events

# Two hours before midnight: the moves below cross it, where days enter and leave windows.
START = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)


def kept(client, database: str) -> tuple[str, dict]:
    """The sums table's identity (a whole build makes a new table, a move keeps it) and its
    sums, each window, scope and song with listens."""
    identity = client.command(
        "SELECT toString(uuid) FROM system.tables"
        " WHERE database = {db:String} AND name = 'int_listens__windowed'",
        parameters={"db": database},
    )
    rows = client.query(
        f"SELECT window_name, scope, song_id, listens FROM {database}.int_listens__windowed"
        " FINAL WHERE listens != 0"
    ).result_rows
    return identity, {(window, scope, song): n for window, scope, song, n in rows}


def expected(listens, as_of: datetime, voided=frozenset()) -> dict:
    every = boards(listens, as_of, keep_top=10**9, voided=voided)
    return {(window, scope, song): n for (window, scope), rows in every.items() for song, n in rows}


def test_moved_sums_equal_the_reference_through_late_events_voids_repairs_and_rebuilds(
    client, config
):
    db = config.database
    generator = ListenGenerator(seed=41, songs=30)
    history = generator.batch(3_000, START - timedelta(days=32), START)
    load_lines(client, db, history.lines)
    listens, voided = list(history.listens), set()
    publish(client, config, START)
    table, sums = kept(client, db)
    assert sums == expected(listens, START)

    def arrive(count: int, start: datetime, end: datetime) -> None:
        batch = generator.batch(count, start, end, retry_from=listens[-100:])
        load_lines(client, db, batch.lines)
        listens.extend(batch.listens)

    as_of = START
    steps = [
        # (minutes on, what arrives before that publication), as they come in production
        (10, lambda a: arrive(200, a, a + timedelta(minutes=10))),
        (0, lambda a: arrive(100, a - timedelta(hours=1), a)),  # late: the last hour
        (30, lambda a: arrive(300, a - timedelta(days=7), a + timedelta(minutes=30))),
        (80, lambda a: arrive(200, a - timedelta(days=31), a - timedelta(days=29))),  # midnight
        (0, lambda a: voided.update(void(client, db, listens[::37]))),
        (190, None),
        (10, lambda a: arrive(100, a - timedelta(days=1, minutes=10), a - timedelta(days=1))),
        (23 * 60, lambda a: arrive(500, a - timedelta(days=2), a + timedelta(hours=23))),
    ]
    for minutes, arriving in steps:
        if arriving:
            arriving(as_of)
        as_of += timedelta(minutes=minutes)
        publish(client, config, as_of)
        identity, sums = kept(client, db)
        assert identity == table, f"at {as_of} the sums were built whole, not moved"
        assert sums == expected(listens, as_of, frozenset(voided)), f"moved to {as_of}"

    # A batch cut off by a crash between its buckets and their sums: its events and buckets
    # written, the all-time totals and days not. The next publication counts those songs again
    # whole (as wrong as a whole build, until the repair); the repair's recount changes only
    # the sums, and the one after it counts them again whole, right.
    cut = generator.batch(150, as_of - timedelta(days=3), as_of - timedelta(days=2))
    batch_id = uuid.uuid4()
    for view in ("listens_total_mv", "listens_by_day_mv"):
        client.command(f"DETACH TABLE {db}.{view}")
    try:
        client.insert(
            f"{db}.listens",
            [
                [x.event_id, x.song_id, x.user_id, x.country, x.event_time, batch_id]
                for x in cut.listens
            ],
            column_names=["event_id", "song_id", "user_id", "country", "event_time", "_batch_id"],
        )
    finally:
        for view in ("listens_total_mv", "listens_by_day_mv"):
            client.command(f"ATTACH TABLE {db}.{view}")
    publish(client, config, as_of)
    recount_buckets(
        client,
        db,
        f"SELECT event_id FROM {db}.listens WHERE _batch_id = {{batch:UUID}}",
        {"batch": batch_id},
    )
    listens.extend(cut.listens)
    as_of += timedelta(minutes=10)
    publish(client, config, as_of)
    identity, sums = kept(client, db)
    assert identity == table
    assert sums == expected(listens, as_of, frozenset(voided)), "after the repair"

    # Further than a day, or after a rebuild swapped new buckets in, or after a move cut off
    # half way (its comment left empty): built whole, and equal all the same.
    for cause in ("a day on", "rebuild", "cut off"):
        if cause == "a day on":
            as_of += timedelta(days=1, minutes=10)
        elif cause == "rebuild":
            rebuild_aggregates(client, db)
        else:
            client.command(f"ALTER TABLE {db}.int_listens__windowed MODIFY COMMENT ''")
        publish(client, config, as_of)
        identity, sums = kept(client, db)
        assert identity != table, f"{cause}: moved instead of built whole"
        assert sums == expected(listens, as_of, frozenset(voided)), cause
        table = identity


def void(client, database: str, listens) -> set[str]:
    ids = [listen.event_id for listen in listens]
    void_events(client, database, ids, "test traffic")
    return set(ids)
