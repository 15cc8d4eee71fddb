"""End to end on the real embedded engine: load -> raw -> aggregates -> dbt -> snapshot."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from conftest import migrated_before
from reference import align, assert_boards_equal, boards, published_boards

from ingest.generator import Listen, ListenGenerator
from ingest.load import load_lines
from publish.publisher import publish
from toplist.migrate import discover, migrate
from toplist.snapshots import current_snapshot

AS_OF = datetime(2026, 12, 1, 12, 7, 30, tzinfo=UTC)  # published as 12:00, the bucket start
ALIGNED = align(AS_OF)


def tied_listens() -> list[Listen]:
    """Songs tied on listens in Iceland, whose ids sort differently bytewise and by case."""
    listens = []
    for song_id, count in (("b", 3), ("Ä", 3), ("B", 3), ("a", 3), ("c", 2)):
        for i in range(count):
            listens.append(
                Listen(
                    f"tie-{song_id}-{i}", song_id, f"u{i}", "IS", ALIGNED - timedelta(minutes=5 + i)
                )
            )
    return listens


def test_charts_equal_reference_after_duplicates_late_events_and_bad_lines(client, config):
    generator = ListenGenerator(seed=3, songs=300)
    start, end = ALIGNED - timedelta(days=9), ALIGNED + timedelta(hours=2)

    first = generator.batch(6_000, start, end, malformed=15)
    first.lines += [listen.to_json() for listen in tied_listens()]
    first.listens += tied_listens()
    # The second load repeats events of the first (same event_id in a separate load).
    second = generator.batch(
        6_000, start, end, retry_fraction=0.1, malformed=7, retry_from=first.listens
    )

    for batch in (first, second):
        result = load_lines(client, config.database, batch.lines, batch_rows=2_500)
        assert result.read == len(batch.lines)
        assert result.accepted == len(batch.listens), "new events were lost or double counted"
        assert result.duplicates == batch.duplicates, "retried events were not recognised"
        assert result.rejected == batch.malformed, "malformed lines were not dead-lettered"
        assert result.read == result.accepted + result.duplicates + result.rejected

    snapshot = publish(client, config, AS_OF)
    assert snapshot.as_of == ALIGNED, "as_of must be aligned down to the 10-minute bucket"
    accepted = first.listens + second.listens
    expected = boards(accepted, ALIGNED)
    assert_boards_equal(published_boards(client, config.database, snapshot.snapshot_id), expected)

    # Late events: older than the last as_of, in every window; counted in the next snapshot.
    late = generator.batch(
        800, ALIGNED - timedelta(days=8), ALIGNED, retry_fraction=0.05, retry_from=accepted
    )
    result = load_lines(client, config.database, late.lines)
    assert result.accepted == len(late.listens)
    assert result.duplicates == late.duplicates

    corrected = publish(client, config, ALIGNED + timedelta(minutes=10))
    assert current_snapshot(client, config.database, "charts") == corrected
    assert_boards_equal(
        published_boards(client, config.database, corrected.snapshot_id),
        boards(accepted + late.listens, ALIGNED + timedelta(minutes=10)),
    )
    # The first snapshot is untouched by the later events: snapshots are immutable.
    assert_boards_equal(published_boards(client, config.database, snapshot.snapshot_id), expected)


def test_ties_are_broken_bytewise_and_cut_at_keep_top(client, config):
    load_lines(client, config.database, [listen.to_json() for listen in tied_listens()])
    small = replace(config, keep_top=3, k_max=3, default_k=3)
    snapshot = publish(client, small, ALIGNED)
    board = published_boards(client, config.database, snapshot.snapshot_id)[("1h", "IS")]
    # Four songs tie at 3 listens; bytewise 'B' < 'a' < 'b' < 'Ä' (0xC3 0x84); cut at 3 rows.
    assert board == [("B", 3), ("a", 3), ("b", 3)]


def test_each_event_id_counts_once_across_loads_and_within_one(client, config):
    listen = Listen("evt-1", "song-x", "user-1", "SE", ALIGNED - timedelta(minutes=1))
    lines = [listen.to_json(), listen.to_json(epoch_millis=True)] * 3
    load_lines(client, config.database, lines, batch_rows=2)  # duplicates inside and across
    load_lines(client, config.database, lines)  # and again in a later load
    snapshot = publish(client, config, ALIGNED)
    published = published_boards(client, config.database, snapshot.snapshot_id)
    assert published[("1h", "SE")] == [("song-x", 1)]
    assert published[("all", "global")] == [("song-x", 1)]
    raw = client.command(f"SELECT count() FROM {config.database}.listens")
    assert raw == 1, "the raw table must hold each event once"


@pytest.mark.parametrize(
    ("version", "sums", "moments"),
    [
        # a day boundary (a Tuesday) and inside a day
        (30, "day", (datetime(2026, 12, 1, tzinfo=UTC), ALIGNED)),
        # a week boundary (a Monday's midnight: the 7d window is one whole week), another
        # Monday inside its day, and a Tuesday inside a day
        (
            32,
            "week",
            (
                datetime(2026, 11, 30, tzinfo=UTC),
                datetime(2026, 11, 23, 5, 10, tzinfo=UTC),
                ALIGNED,
            ),
        ),
    ],
)
def test_charts_counted_before_the_day_or_week_sums_upgrade_to_them(
    tmp_path, version, sums, moments
):
    """A database counted before the day sums (migrations up to 0029) or the week sums (up to
    0031) is migrated to them from its buckets: the charts equal the reference's at as_ofs on
    and between their boundaries, and the events that arrive after the upgrade count too."""
    with migrated_before(version, tmp_path) as (client, config):
        generator = ListenGenerator(seed=5, songs=200)
        old = generator.batch(4_000, ALIGNED - timedelta(days=40), ALIGNED)
        load_lines(client, config.database, old.lines)
        upgrade = [m.version for m in discover() if m.version >= version]
        assert [m.version for m in migrate(client, config)] == upgrade
        new = generator.batch(1_000, ALIGNED - timedelta(days=40), ALIGNED)
        load_lines(client, config.database, new.lines)
        everything = old.listens + new.listens
        assert client.command(f"SELECT count() FROM {config.database}.listens_by_{sums}") > 0
        for as_of in moments:
            snapshot = publish(client, config, as_of, allow_older=True)
            assert_boards_equal(
                published_boards(client, config.database, snapshot.snapshot_id),
                boards(everything, as_of),
            )
