"""An independent reference for the charts, in plain Python, to hold the SQL to."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta

from ingest.generator import Listen

WINDOW_LENGTHS = {
    "1h": timedelta(hours=1),
    "24h": timedelta(days=1),
    "7d": timedelta(days=7),
    "all": None,
}


def align(moment: datetime, minutes: int = 10) -> datetime:
    return moment.replace(minute=moment.minute - moment.minute % minutes, second=0, microsecond=0)


def boards(
    listens: Iterable[Listen],
    as_of: datetime,
    keep_top: int = 1000,
    voided: frozenset[str] = frozenset(),
) -> dict[tuple[str, str], list[tuple[str, int]]]:
    """{(window, scope): [(song_id, listens), ...]} ranked by listens desc, song_id bytewise,
    counting distinct event_ids in as_of - W <= event_time < as_of."""
    unique: dict[str, Listen] = {}
    for listen in listens:
        unique.setdefault(listen.event_id, listen)
    result = {}
    for window, length in WINDOW_LENGTHS.items():
        counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for listen in unique.values():
            if listen.event_id in voided or listen.event_time >= as_of:
                continue
            if length is not None and listen.event_time < as_of - length:
                continue
            counts[listen.country][listen.song_id] += 1
            counts["global"][listen.song_id] += 1
        for scope, songs in counts.items():
            ranked = sorted(songs.items(), key=lambda item: (-item[1], item[0].encode()))
            result[(window, scope)] = ranked[:keep_top]
    return result


def published_boards(client, database: str, snapshot_id: str):
    rows = client.query(
        f"SELECT window_name, scope, rank, song_id, listens FROM {database}.chart_entries"
        " WHERE snapshot_id = {id:String} ORDER BY window_name, scope, rank",
        parameters={"id": snapshot_id},
    ).result_rows
    result: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)
    for window, scope, rank, song_id, listens in rows:
        board = result[(window, scope)]
        assert rank == len(board) + 1, f"ranks of {window}/{scope} are not 1..n"
        board.append((song_id, int(listens)))
    return dict(result)


def assert_boards_equal(actual, expected) -> None:
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    assert not missing, f"boards a user would find empty: {missing[:5]}"
    assert not extra, f"boards that should not exist (no listens): {extra[:5]}"
    for key, board in expected.items():
        assert actual[key] == board, (
            f"board {key} differs from the reference: first rows {actual[key][:5]} vs {board[:5]}"
        )
