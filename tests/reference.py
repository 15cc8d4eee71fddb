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
    "30d": timedelta(days=30),
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
    """The sums of the buckets (the all-time totals, sql/0013, and the days, 0030) that are not
    what their buckets add up to, as (table, keys, from the buckets, held); [] if none."""
    from toplist.corrections import ROLLUPS

    wrong = []
    for table, keys, from_bucket in ROLLUPS:
        wrong += client.query(
            f"""
            SELECT '{table}', ({keys}), buckets.n, held.n
            FROM (
                SELECT {keys}, sum(n) AS n FROM (
                    SELECT {from_bucket}, finalizeAggregation(listens) AS n
                    FROM {database}.listens_by_10m
                ) GROUP BY ALL
            ) AS buckets
            FULL OUTER JOIN (
                SELECT {keys}, sumMerge(listens) AS n FROM {database}.{table} GROUP BY ALL
            ) AS held USING ({keys})
            WHERE buckets.n != held.n
            ORDER BY ALL LIMIT 5
            """
        ).result_rows
    return wrong


Ranks = dict[tuple, dict[str, int]]  # (policy, scope, metric, window) -> {item: rank}


def movement(history: list[tuple[datetime, Ranks]]) -> dict[tuple, dict[str, tuple]]:
    """What the API should say of each entry of the last publication in `history` (every
    publication of a board, in the order published, with its as_of and ranks): {key: {item:
    (move, peak_rank, streak)}}, by the rule as the issue states it. The publications that
    count are the last published of each as_of before the last one's; "previous" is the
    newest of them; move is places up, "new" or "re-entry"; the peak is the best rank over
    the publications that count and this one; the streak counts them in a row, newest first,
    with this one."""
    as_of, ranks = history[-1]
    counted: dict[datetime, Ranks] = {}
    for moment, published in history[:-1]:
        if moment < as_of:
            counted[moment] = published  # a later publication at one as_of replaces it
    earlier = [counted[moment] for moment in sorted(counted, reverse=True)]
    result: dict[tuple, dict[str, tuple]] = {}
    for key, board in ranks.items():
        result[key] = {}
        for item, rank in board.items():
            seen = [p.get(key, {}).get(item) for p in earlier]
            if seen and seen[0] is not None:
                move: object = seen[0] - rank
            else:
                move = "re-entry" if any(r is not None for r in seen) else "new"
            streak = 1
            for r in seen:
                if r is None:
                    break
                streak += 1
            peak = min([rank, *(r for r in seen if r is not None)])
            result[key][item] = (move, peak, streak)
    return result


def published_ranks(client, database: str, board: str, snapshot_id: str) -> tuple[Ranks, dict]:
    """A snapshot's ranks by (policy, scope, metric, window), and the movement stored with
    each entry, as the API reads it: {key: {item: (move, peak_rank, streak)}}."""
    from api.snapshots import Entry

    rows = client.query(
        f"SELECT policy, scope, metric, window_name, item_id, rank, extra"
        f" FROM {database}.board_entries"
        " WHERE board = {board:String} AND snapshot_id = {id:String}",
        parameters={"board": board, "id": snapshot_id},
    ).result_rows
    ranks: Ranks = defaultdict(dict)
    stored: dict[tuple, dict[str, tuple]] = defaultdict(dict)
    for policy, scope, metric, window, item, rank, extra in rows:
        key = (policy, scope, metric, window)
        ranks[key][item] = int(rank)
        moved = Entry(int(rank), item, 0, dict(extra)).movement()
        stored[key][item] = (moved["move"], moved["peak_rank"], moved["streak"])
    return dict(ranks), dict(stored)
