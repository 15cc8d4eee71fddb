"""Rank movement: how each entry of a new snapshot moved since the previous publication of the
same board, computed once by the publisher and stored with the entry (`board_entries.extra`),
the same on every board.

The rule, in one place (the SQL below):
* "previous" is the latest publication of the board with an earlier as_of than the new one (of
  several publications at one as_of, the last published: a correction republishing an as_of
  replaces that publication here, and is never itself the previous one of another publication
  at its as_of, so it fakes no move and counts once);
* an entry is the same entry in two publications when its policy, scoring version, scope,
  metric, window and item are the same;
* `previous_rank`: its rank in the previous publication, where it was there; else
  `returning` = 1 where it was in an earlier kept publication (the latest of each earlier
  as_of), a re-entry; else it is new;
* `peak_rank`: its best rank, this one and that of the last publication it was in before
  (which carries its own best), so as far back as it has been on the board without leaving
  the kept snapshots;
* `streak`: the publications in a row it has been in, this one included.

The API turns them into `move` (places up since the previous publication: 3 up is 3, 2 down
is -2; "new"; "re-entry"), `peak_rank` and `streak` (api/snapshots.py `Entry.movement`).
"""

from __future__ import annotations

from datetime import datetime

from clickhouse_connect.driver.client import Client

from toplist.boards import Board
from toplist.snapshots import ENTRIES, REGISTRY

# An entry's identity: its item and a hash of the rest with it (joins on one integer and one
# string are twice as fast as on five columns; two entries of one item would have to collide
# in 64 bits among the few hundred lists an item can be on).
_ENTRY = "cityHash64(policy, scoring, scope, metric, window_name, item_id)"
_KEY = f"{_ENTRY} AS entry, item_id"
_ON = "entry, item_id"


def earlier_publications(client: Client, db: str, board: str, as_of: datetime) -> list[str]:
    """The kept publications of `board` with an as_of before `as_of`, the last published of
    each as_of, newest as_of first: the first is the previous publication."""
    rows = client.query(
        f"""
        SELECT snapshot_id FROM {db}.{REGISTRY}
        WHERE board = {{board:String}} AND as_of < {{as_of:DateTime64(3)}}
        ORDER BY as_of DESC, published_at DESC, snapshot_id DESC
        LIMIT 1 BY as_of
        """,
        parameters={"board": board, "as_of": as_of},
    ).result_rows
    return [snapshot_id for (snapshot_id,) in rows]


def insert_entries(
    client: Client, db: str, board: Board, snapshot_id: str, as_of: datetime
) -> None:
    """Copy the board's rankings into board_entries under `snapshot_id`, each entry with its
    movement since the previous publication (module docstring)."""
    earlier = earlier_publications(client, db, board.name, as_of)
    previous, before = (earlier[0], earlier[1:]) if earlier else ("", [])
    ranked = f"(SELECT *, {_KEY} FROM (SELECT {board.entry_columns} FROM {db}.{board.rankings}))"
    kept = f"{db}.{ENTRIES} WHERE board = {{board:String}}"
    previous_entries = f"(SELECT *, {_KEY} FROM {kept} AND snapshot_id = {{previous:String}})"
    # an entry's best rank as stored (entries published before movement existed: their rank)
    best = "if(mapContains(extra, 'peak_rank'), extra['peak_rank'], toFloat64(rank))"
    client.command(
        f"""
        INSERT INTO {db}.{ENTRIES}
            (board, snapshot_id, policy, scoring, scope, metric, window_name, rank, item_id,
             score, extra)
        SELECT
            {{board:String}}, {{snapshot_id:String}},
            n.policy, n.scoring, n.scope, n.metric, n.window_name, n.rank, n.item_id, n.score,
            mapUpdate(
                CAST(n.extra, 'Map(String, Float64)'),
                mapFilter((name, value) -> NOT isNaN(value), map(
                    'previous_rank', if(p.found, toFloat64(p.rank), nan),
                    'returning', if(NOT p.found AND r.found, 1., nan),
                    'peak_rank', least(toFloat64(n.rank), multiIf(
                        p.found, p.best, r.found, r.best, toFloat64(n.rank))),
                    'streak', if(p.found, p.streak + 1, 1.)
                ))
            )
        FROM {ranked} AS n
        LEFT JOIN
        (
            SELECT entry, item_id, rank, {best} AS best,
                if(mapContains(extra, 'streak'), extra['streak'], 1.) AS streak, true AS found
            FROM {previous_entries}
        ) AS p USING ({_ON})
        LEFT JOIN
        (
            -- the entries new since the previous publication that an earlier one held: the
            -- best rank of the latest that did
            SELECT entry, item_id, argMax({best}, as_of) AS best, true AS found
            FROM
            (
                SELECT *, {_KEY} FROM {kept} AND snapshot_id IN {{before:Array(String)}}
                    AND {_ENTRY} IN (
                        SELECT entry FROM {ranked} AS n
                        LEFT ANTI JOIN {previous_entries} AS p USING ({_ON})
                    )
            ) AS e
            INNER JOIN
            (
                SELECT snapshot_id, as_of FROM {db}.{REGISTRY}
                WHERE board = {{board:String}} AND snapshot_id IN {{before:Array(String)}}
            ) AS s USING (snapshot_id)
            GROUP BY entry, item_id
        ) AS r USING ({_ON})
        """,
        parameters={
            "board": board.name,
            "snapshot_id": snapshot_id,
            "previous": previous,
            "before": before,
        },
    )
