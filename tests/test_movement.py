"""Rank movement (publish/movement.py): each entry says how it moved since the previous
publication of its board and window, its peak rank and its streak; a correction republishing
an as_of replaces that publication and fakes no move. Held to the reference in
tests/reference.py on every board."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from reference import movement, published_ranks

from api.app import create_app
from ingest.board_events import ItemEventGenerator, OrderGenerator, PlaybackGenerator
from ingest.catalog import load_catalog
from ingest.generator import Listen
from ingest.load import load_lines
from publish.publisher import publish
from toplist.boards import BOARDS
from toplist.corrections import void_events

AS_OF = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def listens_between(rng: random.Random, tag: str, start: datetime, end: datetime, n: int):
    """n listens of 10 songs (the first ones likelier) in SE and DE, spread over start..end."""
    span = int((end - start).total_seconds())
    return [
        Listen(
            f"{tag}-{i}",
            f"s{min(rng.randrange(10), rng.randrange(10))}",
            "u",
            rng.choice(("SE", "DE")),
            start + timedelta(seconds=rng.randrange(span)),
        )
        for i in range(n)
    ]


def test_moves_peaks_and_streaks_across_publications_with_a_correction_between(client, config):
    config = replace(config, keep_top=3, k_max=3, default_k=3)
    db = config.database
    rng = random.Random(31)
    history, seen = [], set()
    load_lines(
        client,
        db,
        [x.to_json() for x in listens_between(rng, "old", AS_OF - timedelta(days=2), AS_OF, 300)],
    )

    def published(as_of: datetime) -> dict:
        snapshot = publish(client, config, as_of)
        ranks, stored = published_ranks(client, db, "charts", snapshot.snapshot_id)
        history.append((as_of, ranks))
        expected = movement(history)
        assert stored == expected
        seen.update(
            "up"
            if isinstance(move, int) and move > 0
            else "down"
            if isinstance(move, int) and move < 0
            else str(move)
            for board in stored.values()
            for move, _, _ in board.values()
        )
        return stored

    first = published(AS_OF)
    assert {move for board in first.values() for move, _, _ in board.values()} == {"new"}
    as_of = AS_OF
    for step in range(5):  # every 10 minutes, new listens in the last hour: the 1h boards churn
        later = as_of + timedelta(minutes=10)
        fresh = listens_between(rng, f"step{step}", later - timedelta(minutes=40), later, 60)
        load_lines(client, db, [x.to_json() for x in fresh])
        moved = published(later)
        as_of = later
    before_correction = moved

    # A correction republishes the same as_of: it replaces that publication, so its moves are
    # against the publication before (not against the one it replaces) and its streak counts
    # that as_of once.
    top = ("v1", "SE", "listens", "1h")
    song = min(before_correction[top], key=lambda item: history[-1][1][top][item])
    voided = client.query(
        f"SELECT event_id FROM {db}.listens WHERE song_id = {{song:String}} AND country = 'SE'"
        " AND event_time >= {start:DateTime64(3)} AND event_time < {end:DateTime64(3)}",
        parameters={"song": song, "start": as_of - timedelta(hours=1), "end": as_of},
    ).result_rows
    void_events(client, db, [event_id for (event_id,) in voided], "test traffic")
    corrected = published(as_of)
    # the voided song fell (or left the board); every other entry keeps its streak
    assert corrected[top].get(song, (None, None, 0))[2] <= before_correction[top][song][2]
    for item, (_, _, streak) in corrected[top].items():
        assert (
            streak == before_correction[top].get(item, (None, None, 1))[2]
            or item not in before_correction[top]
        )
    after = published(as_of + timedelta(minutes=10))
    streaks = [streak for board in after.values() for _, _, streak in board.values()]
    assert max(streaks) == len({moment for moment, _ in history}), "an as_of counted twice"
    assert {"up", "down", "0", "new", "re-entry"} <= seen, seen

    app = create_app(config)
    try:
        api = app.test_client()
        expected = movement(history)
        for scope in ("SE", "DE", "global"):
            for window in ("1h", "24h"):
                body = api.get(f"/v1/charts/{scope}?window={window}").get_json()
                board = expected[("v1", scope, "listens", window)]
                assert [
                    (i["song_id"], i["move"], i["peak_rank"], i["streak"]) for i in body["items"]
                ] == [(i["song_id"], *board[i["song_id"]]) for i in body["items"]]
        item = body["items"][-1]
        one = api.get(f"/v1/charts/global/songs/{item['song_id']}?window=24h").get_json()
        around = api.get(
            f"/v1/charts/global/songs/{item['song_id']}/around?window=24h&n=1"
        ).get_json()
        assert (one["move"], one["peak_rank"], one["streak"]) == (
            item["move"],
            item["peak_rank"],
            item["streak"],
        )
        assert around["items"][-1] == item
    finally:
        app.extensions["toplist"].close()


NOW = datetime(2026, 12, 4, 12, 0, 30, tzinfo=UTC)

# board -> the API list to read, the id field of its items, its list in the snapshot
BOARD_CASES = {
    "listeners": ("/v1/listeners?k=5", "song_id", ("v1", "global", "listeners", "now")),
    "sale": ("/v1/sale/products?k=5", "product_id", ("v1", "products", "units", "all")),
    "popular": (
        "/v1/topk?scope=global&metric=views&window=1d&k=5",
        "item_id",
        ("v1", "global", "views", "1d"),
    ),
}


def board_lines(board: str) -> list[str]:
    if board == "listeners":
        return PlaybackGenerator(seed=5, users=300).history(NOW - timedelta(minutes=5), NOW).lines
    if board == "sale":
        return (
            OrderGenerator(seed=5, products=30).orders(3_000, NOW - timedelta(hours=1), NOW).lines
        )
    return ItemEventGenerator(seed=5).events(3_000, NOW - timedelta(hours=2), NOW).lines


@pytest.mark.parametrize("board", sorted(BOARD_CASES))
def test_every_board_says_how_its_entries_moved(client, config, board):
    """The same rule on the other boards: three publications as their events arrive, one
    republished at the same as_of between them, each held to the reference."""
    db = config.database
    config = replace(
        config, board_keep_top=8, popular_keep_top=8, popular_k_max=8, shelf_min_orders=8
    )
    lines = board_lines(board)
    if board == "popular":
        load_catalog(client, db, [json.dumps(r) for r in ItemEventGenerator(seed=5).catalog()])
    history, parts = (
        [],
        [
            lines[: len(lines) // 3],
            lines[len(lines) // 3 : 2 * len(lines) // 3],
            [],
            lines[2 * len(lines) // 3 :],
        ],
    )
    moments = [
        NOW - timedelta(minutes=2),
        NOW - timedelta(minutes=1),
        NOW - timedelta(minutes=1),
        NOW,
    ]
    kinds = set()
    for part, moment in zip(parts, moments, strict=True):
        if part:
            load_lines(client, db, part, board=BOARDS[board])
        snapshot = publish(client, config, board=board, as_of=moment)
        ranks, stored = published_ranks(client, db, board, snapshot.snapshot_id)
        history.append((snapshot.as_of, ranks))
        assert stored == movement(history), board
        kinds |= {
            type(move).__name__ if move != "re-entry" else move
            for entries in stored.values()
            for move, _, _ in entries.values()
        }
    assert {"int", "str"} <= kinds, kinds
    path, id_field, key = BOARD_CASES[board]
    app = create_app(config)
    try:
        body = app.test_client().get(path).get_json()
        assert body["items"], body
        for item in body["items"]:
            moved = (item["move"], item["peak_rank"], item["streak"])
            assert moved == stored[key][item[id_field]], item
    finally:
        app.extensions["toplist"].close()
