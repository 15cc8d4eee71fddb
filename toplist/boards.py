"""The board registry (DESIGN.md "Boards are data"): every board, the flagship charts
included, is one `Board` here, and everything that ingests, publishes, caches or reports on
boards loops over `BOARDS` instead of naming one. A new board is one entry here plus its
SQL (`sql/`) and dbt models (`models/boards/`); docs/boards.md walks through it.

This module is the bottom of the code: it imports nothing of Toplist's. The settings a board
names (its topic, refresh, kept depth) are fields of `toplist.config.Config`, looked up by
name, so the configuration stays the one place that reads the environment.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Board:
    """One board: its event contract's name, its way in, its aggregates, its dbt models and
    its snapshots.

    The way in is `{prefix}_incoming` (what every source writes: a file, the embedded Kafka
    consumer, the server's Kafka engine), the batch log and done list
    `{prefix}_incoming_log` / `{prefix}_incoming_done`, the raw events `raw` and the dead
    letters `{prefix}_dead_letters` (sql/0015..0020 give each board that shape).
    """

    name: str
    what: str  # what one message is, for messages to people ("listen event")
    prefix: str
    raw: str
    # The field a board's messages are keyed by: their Kafka partition (`toplist produce`) and,
    # on a cluster, their shard (toplist/cluster.py).
    key: str
    # The ids of the events accepted, where an event counts once per event_id (the first copy
    # wins: sql/0004, 0020), each with the fingerprint of the copy that counted (0022: a later
    # copy with another is a conflict); '' for a board whose events have no event_id.
    ids: str
    # The aggregates fed from the raw events and rebuilt from them (`toplist rebuild`), each
    # with the materialized view that fills it.
    aggregates: tuple[tuple[str, str], ...]
    # Whether a repeated write to its aggregates changes nothing (max, argMax, distinct-count
    # states). Where it would (the charts' sums), a batch repaired after a crash recounts
    # the buckets its events fall in.
    idempotent_aggregates: bool
    # The dbt models a publication builds: the ranked entries, and the one-row summary
    # (as_of, policy, policies, stats) that describes the snapshot.
    rankings: str
    summary: str
    # The Config fields that hold its Kafka topic, its refresh interval (seconds between
    # publications) and how many rows a snapshot keeps per list; its consumer group is
    # TOPLIST_KAFKA_GROUP plus `group_suffix`.
    topic_setting: str
    refresh_setting: str
    keep_top_setting: str
    group_suffix: str
    # The Config field after which a snapshot is reported stale; '' for three missed refreshes.
    stale_setting: str = ""
    # Its snapshot's shape: what the rankings model gives for each column of board_entries
    # (policy, scoring, scope, metric, window_name, rank, item_id, score, extra), named so. A
    # board without scoring versions (macros/scoring.sql) holds its one score as 'v1'.
    entry_columns: str = (
        "policy, 'v1' AS scoring, scope, metric, window_name, rank, item_id, score, extra"
    )
    # Whether its summary model names the scoring versions it scored with (`scorings`).
    scored: bool = False
    # The table of its voided event ids (corrections: `toplist void --board`), '' for a board
    # without corrections (live listeners: a playback report is state that expires, not an
    # event that counts).
    voids: str = ""
    # The raw event's fields a void row copies (its board coordinates, where a view takes the
    # event back out of a sum: the charts' buckets, sql/0008); () where the void is its id.
    void_copies: tuple[str, ...] = ()
    # Whether its items are shown through the catalog (sql/0017): its snapshot file then
    # carries the catalog rows of the items it ranks that may be shown.
    catalog: bool = False
    # Whether new events start a publication at once (within its pacing) rather than wait
    # for the next refresh: the live boards, whose as_of is the moment itself ("an order should
    # affect the board within a second or two"). The others are cut on coarser steps, so a
    # publication between two refreshes would mostly rank what the last one did.
    publish_on_arrival: bool = False
    # The step its as_of is cut down to, in seconds (the charts' 10-minute buckets, sql/0005;
    # the shelves' 10 seconds, macros/windows.sql board_as_of): its refreshes fall just after
    # the cuts (publish/scheduler.py `Paced`). 0 for a board cut at the moment itself.
    as_of_step: int = 0

    @property
    def incoming(self) -> str:
        return f"{self.prefix}_incoming"

    @property
    def log(self) -> str:
        return f"{self.prefix}_incoming_log"

    @property
    def done(self) -> str:
        return f"{self.prefix}_incoming_done"

    @property
    def dead_letters(self) -> str:
        return f"{self.prefix}_dead_letters"

    @property
    def exactly_once(self) -> bool:
        """Whether a repeated event is stopped on the way in, so that a load can tell
        duplicates apart (a repeated playback report is valid, and changes nothing)."""
        return bool(self.ids)

    @property
    def tables(self) -> tuple[str, ...]:
        """Every table of the board's own, from the way in to its aggregates."""
        ids = (self.ids,) if self.ids else ()
        way_in = (self.incoming, self.log, self.done, self.dead_letters, self.raw, *ids)
        return (*way_in, *(table for table, _ in self.aggregates))


CHARTS = Board(
    name="charts",
    what="listen event",
    prefix="listens",
    raw="listens",
    key="event_id",
    ids="listen_ids",
    aggregates=(
        ("listens_by_10m", "listens_by_10m_mv"),
        ("listens_total", "listens_total_mv"),
        ("listens_by_day", "listens_by_day_mv"),
        ("listens_by_week", "listens_by_week_mv"),
    ),
    idempotent_aggregates=False,
    rankings="chart_rankings",
    summary="int_chart__as_of",
    # A chart entry is a song and its listens, once per policy it was ranked with.
    entry_columns=(
        "policy, 'v1' AS scoring, scope, 'listens' AS metric, window_name, rank,"
        " song_id AS item_id, listens AS score, map() AS extra"
    ),
    voids="listen_voids",
    void_copies=("song_id", "country", "event_time", "beyond_horizon"),
    topic_setting="kafka_topic",
    refresh_setting="publish_interval_seconds",
    keep_top_setting="keep_top",
    group_suffix="",
    stale_setting="stale_after_seconds",
    as_of_step=600,
)

BOARDS: dict[str, Board] = {
    board.name: board
    for board in (
        CHARTS,
        Board(
            name="listeners",
            what="playback report",
            prefix="playbacks",
            raw="playback_reports",
            # A user's reports meet on one partition and one shard: each user counts once.
            key="user_id",
            ids="",
            aggregates=(("playbacks", "playbacks_mv"),),
            idempotent_aggregates=True,
            rankings="listener_rankings",
            summary="listener_summary",
            topic_setting="kafka_topic_listeners",
            refresh_setting="listeners_refresh_seconds",
            keep_top_setting="board_keep_top",
            group_suffix="-listeners",
            publish_on_arrival=True,
        ),
        Board(
            name="sale",
            what="order event",
            prefix="orders",
            raw="orders",
            key="event_id",
            ids="order_ids",
            aggregates=(("sale_buyers_by_product", "sale_buyers_by_product_mv"),),
            voids="order_voids",
            idempotent_aggregates=True,
            rankings="sale_rankings",
            summary="sale_summary",
            topic_setting="kafka_topic_sale",
            refresh_setting="sale_refresh_seconds",
            keep_top_setting="board_keep_top",
            group_suffix="-sale",
            publish_on_arrival=True,
        ),
        Board(
            name="popular",
            what="item event",
            prefix="item_events",
            raw="item_events",
            key="event_id",
            ids="item_event_ids",
            aggregates=(("item_activity_by_10s", "item_activity_by_10s_mv"),),
            voids="item_event_voids",
            idempotent_aggregates=True,
            rankings="popular_rankings",
            summary="popular_summary",
            entry_columns=(
                "policy, scoring, scope, metric, window_name, rank, item_id, score, extra"
            ),
            scored=True,
            topic_setting="kafka_topic_popular",
            refresh_setting="popular_refresh_seconds",
            keep_top_setting="popular_keep_top",
            group_suffix="-popular",
            as_of_step=10,
            catalog=True,
        ),
    )
}


# The boards that take corrections (`toplist void --board`, POST /internal/corrections).
VOIDABLE = tuple(name for name, spec in BOARDS.items() if spec.voids)


def board(name: str) -> Board:
    """The board of that name; a ValueError naming the known ones otherwise."""
    try:
        return BOARDS[name]
    except KeyError:
        raise ValueError(f"unknown board {name!r}; known: {', '.join(BOARDS)}") from None
