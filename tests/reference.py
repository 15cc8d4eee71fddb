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
    policy: str = "v1",
    counted=lambda listen: True,
) -> dict[tuple[str, str], list[tuple[str, int]]]:
    """{(window, scope): [(song_id, listens), ...]} ranked by listens desc, song_id bytewise,
    counting distinct event_ids in as_of - W <= event_time < as_of (and `counted`; the first
    delivery of an event_id is the one that counts). v1 keeps the first keep_top rows;
    v1-ties also keeps every song tied with the one at keep_top."""
    unique: dict[str, Listen] = {}
    for listen in listens:
        unique.setdefault(listen.event_id, listen)
    result = {}
    for window, length in WINDOW_LENGTHS.items():
        counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for listen in unique.values():
            if listen.event_id in voided or listen.event_time >= as_of or not counted(listen):
                continue
            if length is not None and listen.event_time < as_of - length:
                continue
            counts[listen.country][listen.song_id] += 1
            counts["global"][listen.song_id] += 1
        for scope, songs in counts.items():
            ranked = sorted(songs.items(), key=lambda item: (-item[1], item[0].encode()))
            result[(window, scope)] = cut(ranked, keep_top, policy)
    return result


def cut(ranked: list[tuple[str, int]], k: int, policy: str) -> list[tuple[str, int]]:
    if policy == "v1" or len(ranked) <= k:
        return ranked[:k]
    assert policy == "v1-ties", policy
    last = ranked[k - 1][1]
    return [row for row in ranked if row[1] >= last]


def tie_ranks(board: list[tuple[str, int]]) -> list[int]:
    """Competition ranks (1, 2, 2, 4) of a board ordered by listens descending."""
    ranks: list[int] = []
    for position, (_, listens) in enumerate(board):
        tied = position and board[position - 1][1] == listens
        ranks.append(ranks[-1] if tied else position + 1)
    return ranks


def published_boards(client, database: str, snapshot_id: str, policy: str = "v1"):
    """A snapshot's boards for one policy, as `boards` gives them; checks the ranks too
    (v1: 1..n; v1-ties: tied songs share a rank)."""
    rows = client.query(
        f"SELECT window_name, scope, rank, item_id, score FROM {database}.board_entries"
        " WHERE board = 'charts' AND snapshot_id = {id:String} AND policy = {policy:String}"
        " ORDER BY window_name, scope, rank, item_id",
        parameters={"id": snapshot_id, "policy": policy},
    ).result_rows
    result: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)
    ranks: dict[tuple[str, str], list[int]] = defaultdict(list)
    for window, scope, rank, song_id, listens in rows:
        result[(window, scope)].append((song_id, int(listens)))
        ranks[(window, scope)].append(int(rank))
    for key, board in result.items():
        expected = list(range(1, len(board) + 1)) if policy == "v1" else tie_ranks(board)
        assert ranks[key] == expected, f"{policy} ranks of {key} are {ranks[key][:10]}"
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


def aggregates(client, database: str):
    """The bucket aggregates as merged rows, zero counts left out (to compare two states)."""
    return client.query(
        f"SELECT bucket_start, country, song_id, sumMerge(listens) AS n"
        f" FROM {database}.listens_by_10m GROUP BY ALL HAVING n != 0 ORDER BY ALL"
    ).result_rows


def totals_mismatch(client, database: str):
    """Songs whose all-time total (sql/0013) is not the sum of their buckets; [] if none."""
    return client.query(
        f"""
        SELECT country, song_id, buckets.n, totals.n
        FROM (
            SELECT country, song_id, sumMerge(listens) AS n
            FROM {database}.listens_by_10m GROUP BY ALL
        ) AS buckets
        FULL OUTER JOIN (
            SELECT country, song_id, sumMerge(listens) AS n
            FROM {database}.listens_total GROUP BY ALL
        ) AS totals USING (country, song_id)
        WHERE buckets.n != totals.n
        ORDER BY ALL LIMIT 5
        """
    ).result_rows
