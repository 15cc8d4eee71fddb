"""Versioned ranking policies (v1, v1-ties), late events, the late horizon, raw retention, and
rebuilds that keep reads working. Every board is held to the Python reference."""

from __future__ import annotations

import random
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from reference import aggregates, align, assert_boards_equal, boards, published_boards, tie_ranks

from api.app import create_app
from ingest.generator import Listen, ListenGenerator
from ingest.load import load_lines
from publish.publisher import publish
from toplist.corrections import rebuild_aggregates, void_events
from toplist.engine import connect
from toplist.migrate import apply_settings

AS_OF = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def tied_listens(seed: int) -> list[Listen]:
    """20 songs in 3 countries with 0-4 listens each over ten days: ties everywhere."""
    rng = random.Random(seed)
    listens = []
    for country in ("SE", "DE", "US"):
        for song in range(20):
            for i in range(rng.randint(0, 4)):
                moment = AS_OF - timedelta(seconds=rng.randrange(1, 10 * 86400))
                listens.append(
                    Listen(f"{country}-{song}-{i}", f"s{song:02d}", "u", country, moment)
                )
    return listens


def test_v1_and_v1_ties_match_the_reference_and_v1_never_changes(client, config):
    config = replace(config, keep_top=5, k_max=5, default_k=5)
    listens = tied_listens(seed=3)
    load_lines(client, config.database, [listen.to_json() for listen in listens])

    snapshot = publish(client, config, AS_OF)
    assert snapshot.policies == ("v1", "v1-ties")
    v1 = published_boards(client, config.database, snapshot.snapshot_id, "v1")
    ties = published_boards(client, config.database, snapshot.snapshot_id, "v1-ties")
    assert_boards_equal(v1, boards(listens, AS_OF, keep_top=5, policy="v1"))
    assert_boards_equal(ties, boards(listens, AS_OF, keep_top=5, policy="v1-ties"))
    longer = [key for key in v1 if len(ties[key]) > len(v1[key])]
    assert len(longer) >= 5, "the data must have ties across the cut for this test to mean much"

    # v1 alone, as before v1-ties existed: the same rows, row for row.
    alone = publish(client, replace(config, policies=("v1",)), AS_OF)
    assert published_boards(client, config.database, alone.snapshot_id, "v1") == v1

    # Through the API, per request. The v1-only snapshot is now current.
    app = create_app(config)
    api = app.test_client()
    try:
        missing = api.get("/v1/charts/SE?policy=v1-ties")
        assert missing.status_code == 404
        assert missing.get_json()["error"]["code"] == "policy_not_published"
        bad = api.get("/v1/charts/SE?policy=v2")
        assert bad.status_code == 400 and bad.get_json()["error"]["code"] == "invalid_policy"

        publish(client, config, AS_OF)
        expected = boards(listens, AS_OF, keep_top=3, policy="v1-ties")
        for window, scope in [("24h", "SE"), ("7d", "DE"), ("all", "global"), ("1h", "US")]:
            body = api.get(f"/v1/charts/{scope}?window={window}&k=3&policy=v1-ties").get_json()
            assert body["policy"] == "v1-ties"
            items = [(item["song_id"], item["listens"]) for item in body["items"]]
            assert items == expected.get((window, scope), []), (window, scope)
            assert [item["rank"] for item in body["items"]] == tie_ranks(items)
            default = api.get(f"/v1/charts/{scope}?window={window}&k=3").get_json()
            assert default["policy"] == "v1" and len(default["items"]) <= 3
            v1_items = [(item["song_id"], item["listens"]) for item in default["items"]]
            assert v1_items == items[:3], "v1 is v1-ties cut at exactly k"
        song, listens_of_song = expected[("all", "global")][-1]
        rank = api.get(f"/v1/charts/global/songs/{song}?window=all&policy=v1-ties").get_json()
        assert (rank["rank"], rank["listens"]) == (
            tie_ranks(expected[("all", "global")])[-1],
            listens_of_song,
        )
        assert set(api.get("/v1/scopes").get_json()["policies"]) == {"v1", "v1-ties"}
    finally:
        app.extensions["toplist"].close()


def test_each_window_starts_at_as_of_minus_its_length_and_ends_before_as_of(client, config):
    """On each window's edges, through the API: a listen at exactly as_of - W counts in W, one
    a millisecond earlier does not; one a millisecond before as_of counts, one at as_of
    does not (it waits for the next snapshot)."""
    edges = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7)}
    edges["30d"] = timedelta(days=30)
    listens = [Listen("at-as-of", "edge", "u", "SE", AS_OF)]
    listens.append(
        Listen("just-before-as-of", "edge", "u", "SE", AS_OF - timedelta(milliseconds=1))
    )
    for window, length in edges.items():
        listens.append(Listen(f"first-{window}", "edge", "u", "SE", AS_OF - length))
        listens.append(
            Listen(
                f"outside-{window}", "edge", "u", "SE", AS_OF - length - timedelta(milliseconds=1)
            )
        )
    load_lines(client, config.database, [listen.to_json() for listen in listens])
    publish(client, config, AS_OF)
    expected = boards(listens, AS_OF)
    # 1h holds the listen just before as_of and its own first instant; each longer window
    # adds the previous window's outside listen and its own first instant.
    counts = {"1h": 2, "24h": 4, "7d": 6, "30d": 8, "all": 9}
    app = create_app(config)
    try:
        api = app.test_client()
        for window, count in counts.items():
            assert expected[(window, "SE")] == [("edge", count)], window
            for scope in ("SE", "global"):
                body = api.get(f"/v1/charts/{scope}?window={window}").get_json()
                assert [(item["song_id"], item["listens"]) for item in body["items"]] == [
                    ("edge", count)
                ], (window, scope, body)
    finally:
        app.extensions["toplist"].close()


def test_late_events_move_the_next_snapshot_in_every_window(client, config):
    generator = ListenGenerator(seed=21, songs=60)
    on_time = generator.batch(3_000, AS_OF - timedelta(days=30), AS_OF)
    load_lines(client, config.database, on_time.lines)
    first = publish(client, config, AS_OF)
    assert_boards_equal(
        published_boards(client, config.database, first.snapshot_id), boards(on_time.listens, AS_OF)
    )

    # Events older than the last as_of arrive afterwards: some in the last hour before it, some
    # in its day, its week, its month; with retries of earlier events mixed in.
    late_lines, late = [], []
    for start, end in [
        (AS_OF - timedelta(hours=1), AS_OF),
        (AS_OF - timedelta(days=1), AS_OF - timedelta(hours=1)),
        (AS_OF - timedelta(days=7), AS_OF - timedelta(days=1)),
        (AS_OF - timedelta(days=30), AS_OF - timedelta(days=7)),
    ]:
        batch = generator.batch(200, start, end, retry_from=on_time.listens)
        late_lines += batch.lines
        late += batch.listens
    load_lines(client, config.database, late_lines)

    everything = on_time.listens + late
    # The next snapshot, at the same as_of: each window's global total moved by exactly the
    # late events inside that window, and every board is the reference's.
    second = publish(client, config, AS_OF)
    after = published_boards(client, config.database, second.snapshot_id)
    assert_boards_equal(after, boards(everything, AS_OF))
    before = published_boards(client, config.database, first.snapshot_id)
    lengths = {
        "1h": timedelta(hours=1),
        "24h": timedelta(days=1),
        "7d": timedelta(days=7),
        "30d": timedelta(days=30),
    }
    for window in ("1h", "24h", "7d", "30d", "all"):
        start = AS_OF - lengths.get(window, timedelta(days=365))
        moved = sum(n for _, n in after[(window, "global")]) - sum(
            n for _, n in before[(window, "global")]
        )
        assert moved == sum(1 for x in late if x.event_time >= start) > 0, window
    # And one a bucket later, as the schedule would cut it.
    next_as_of = AS_OF + timedelta(minutes=10)
    third = publish(client, config, next_as_of)
    assert_boards_equal(
        published_boards(client, config.database, third.snapshot_id),
        boards(everything, next_as_of),
    )


def test_horizon_keeps_very_late_events_in_raw_without_counting_them(client, config):
    config = replace(config, late_horizon_seconds=2 * 86400)
    apply_settings(client, config)
    now = datetime.now(UTC)
    generator = ListenGenerator(seed=22, songs=40)
    as_of = align(now)  # no later: an as_of in the future is refused
    recent = generator.batch(1_000, now - timedelta(days=2) + timedelta(hours=1), as_of)
    too_late = generator.batch(400, now - timedelta(days=9), now - timedelta(days=2, hours=1))
    load_lines(client, config.database, recent.lines + too_late.lines)
    everything = recent.listens + too_late.listens

    def counted(listen: Listen) -> bool:
        return listen.event_time > now - timedelta(days=2)

    snapshot = publish(client, config, as_of)
    assert_boards_equal(
        published_boards(client, config.database, snapshot.snapshot_id),
        boards(everything, as_of, counted=counted),
    )
    raw = client.command(f"SELECT count() FROM {config.database}.listens")
    assert raw == len(everything), "events beyond the horizon must stay in the raw table"

    app = create_app(config)
    try:
        text = app.test_client().get("/metrics").get_data(as_text=True)
    finally:
        app.extensions["toplist"].close()
    line = (
        'toplist_events_beyond_horizon_total{board="charts",source="load"}'
        f" {len(too_late.listens)}"
    )
    assert line in text, f"/metrics lacks {line}"

    # Voiding a never-counted event takes nothing away; voiding a counted one does.
    voided = [too_late.listens[0].event_id, recent.listens[0].event_id]
    void_events(client, config.database, voided, "test traffic")
    corrected = publish(client, config, as_of)
    assert corrected.void_count == 2
    assert_boards_equal(
        published_boards(client, config.database, corrected.snapshot_id),
        boards(everything, as_of, voided=frozenset(voided), counted=counted),
    )

    # The flag was decided on arrival: a rebuild reproduces it even after the horizon changes.
    incremental = aggregates(client, config.database)
    apply_settings(client, replace(config, late_horizon_seconds=0))
    rebuild_aggregates(client, config.database)
    assert aggregates(client, config.database) == incremental


def test_rebuild_swaps_atomically_while_reads_keep_working(client, config):
    generator = ListenGenerator(seed=23, songs=80)
    previous = []
    for _ in range(8):  # many batches, retries across them, events up to five months late
        batch = generator.batch(
            1_500, AS_OF - timedelta(days=150), AS_OF, retry_fraction=0.1, retry_from=previous
        )
        load_lines(client, config.database, batch.lines)
        previous = batch.listens
    incremental = aggregates(client, config.database)
    before = publish(client, config, AS_OF)
    total = f"SELECT sumMerge(listens) FROM {config.database}.listens_by_10m"
    good = int(client.command(total))
    # Damage the aggregates (as a crash inside a server's MV chain could): 7 listens too many.
    client.command(
        f"INSERT INTO {config.database}.listens_by_10m"
        " SELECT bucket_start, country, song_id, sumState(toInt64(7)) FROM"
        f" {config.database}.listens_by_10m GROUP BY ALL LIMIT 1"
    )
    damaged = int(client.command(total))
    assert damaged == good + 7

    app = create_app(config)
    api = app.test_client()
    reader = connect(config)
    seen, errors, done = [], [], threading.Event()
    progress = []
    worker = threading.Thread(
        target=lambda: (
            rebuild_aggregates(
                client, config.database, progress=lambda *step: progress.append(step)
            ),
            done.set(),
        )
    )
    try:
        worker.start()
        while not done.is_set() or not seen:
            try:
                seen.append(int(reader.command(total)))
                assert api.get("/v1/charts/global?window=all").status_code == 200
            except Exception as error:  # noqa: BLE001 - any failed read fails the test
                errors.append(repr(error))
        worker.join()
        seen.append(int(reader.command(total)))  # the other reader sees the swap at once
    finally:
        reader.close()
        app.extensions["toplist"].close()
    assert not errors, f"reads failed during the rebuild: {errors[:3]}"
    assert set(seen) <= {damaged, good}, "a reader saw a half-rebuilt table"
    flipped = [n for n in range(1, len(seen)) if seen[n] != seen[n - 1]]
    assert seen[-1] == good and len(flipped) <= 1, f"old and new interleaved: {seen}"
    assert int(client.command(total)) == good
    assert len(progress) >= 5 and [step[0] for step in progress] == list(
        range(1, len(progress) + 1)
    )
    assert aggregates(client, config.database) == incremental
    after = publish(client, config, AS_OF)
    for policy in ("v1", "v1-ties"):
        assert published_boards(
            client, config.database, after.snapshot_id, policy
        ) == published_boards(client, config.database, before.snapshot_id, policy), policy


def test_raw_ttl_expires_old_raw_events_and_rebuild_keeps_their_months(client, config):
    config = replace(config, raw_ttl_days=30)
    apply_settings(client, config)
    create = client.command(f"SHOW CREATE TABLE {config.database}.listens")
    assert "TTL toDateTime(event_time) + toIntervalDay(30)" in create
    now = datetime.now(UTC)
    generator = ListenGenerator(seed=24, songs=30)
    old = generator.batch(500, now - timedelta(days=120), now - timedelta(days=95))
    fresh = generator.batch(500, now - timedelta(days=20), now)
    load_lines(client, config.database, old.lines + fresh.lines)
    client.command(f"OPTIMIZE TABLE {config.database}.listens FINAL")
    raw = client.command(f"SELECT count() FROM {config.database}.listens")
    assert raw == len(fresh.listens), "raw events past the TTL should have expired"

    counted = aggregates(client, config.database)
    result = rebuild_aggregates(client, config.database, raw_ttl_days=config.raw_ttl_days)
    assert result.expired, "the months of expired raw events must be kept, not recounted"
    assert aggregates(client, config.database) == counted, "a rebuild lost expired listens"

    apply_settings(client, replace(config, raw_ttl_days=0))
    assert "TTL" not in client.command(f"SHOW CREATE TABLE {config.database}.listens")
