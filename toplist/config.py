"""Configuration, read from environment variables in one place, with typed defaults."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from toplist.boards import board as find_board

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA_DIR = Path.cwd() / ".toplist" / "chdb"

# The charts' windows and their lengths in seconds (None: everything before as_of), as
# macros/windows.sql defines them for the rankings (a test holds the two equal).
WINDOW_SECONDS: dict[str, int | None] = {
    "1h": 3600,
    "24h": 86400,
    "7d": 604800,
    "30d": 2592000,
    "all": None,
}
WINDOWS = tuple(WINDOW_SECONDS)
# The marketplace shelves' windows and their lengths in seconds (macros/windows.sql; a test
# holds the two equal) and metrics.
POPULAR_WINDOW_SECONDS = {"1m": 60, "1h": 3600, "1d": 86400, "7d": 604800, "28d": 2419200}
POPULAR_WINDOWS = tuple(POPULAR_WINDOW_SECONDS)
# A restaurant's public shelf: its windows, widest last (a restaurant with too few orders in
# one is shown the next), and the most items it shows.
SHELF_WINDOWS = ("1d", "7d", "28d")
SHELF_K_MAX = 20
POPULAR_METRICS = ("views", "orders")
# Every ranking policy version (macros/ranking_policy.sql); a version's meaning never changes.
POLICIES = ("v1", "v1-ties")
# Every scoring version of the shelves (macros/scoring.sql; a test holds the two equal). v1
# scores each metric by its count; the cold start of a restaurant's shelf reads v1's orders.
SCORINGS = ("v1", "v2")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# ClickHouse's own databases (names compared without case: INFORMATION_SCHEMA and
# information_schema are both there), which Toplist's tables must never go into.
_RESERVED_DATABASES = frozenset({"system", "information_schema", "_temporary_and_external_tables"})
_KAFKA_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
_BROKER = re.compile(r"[A-Za-z0-9.-]+:[0-9]{1,5}")


class ConfigError(ValueError):
    """A configuration value is missing or malformed."""


def _int(env: dict[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    return value


def _float(env: dict[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {value}")
    return value


def chdb_path(url: str) -> Path:
    """The data directory of a `chdb:///dir` URL."""
    if not url.startswith("chdb://"):
        raise ValueError(f"not a chdb URL: {url!r}")
    return Path(url.removeprefix("chdb://"))


def _names(env: dict[str, str], name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    return tuple(dict.fromkeys(part.strip() for part in raw.split(",") if part.strip()))


@dataclass(frozen=True)
class Config:
    """Everything Toplist can be told from outside. Build it with `Config.from_env()`."""

    clickhouse_url: str = field(default_factory=lambda: f"chdb://{DEFAULT_DATA_DIR}")
    database: str = "toplist"
    # Server mode on a ClickHouse cluster: its name in the servers' remote_servers. Empty: one
    # node. The migrations are rendered for it (toplist/cluster.py).
    clickhouse_cluster: str = ""
    # Production publishes every 10 minutes; `toplist run` shortens it for the demo.
    publish_interval_seconds: float = 600.0
    # A snapshot older than this is reported as stale (default: three missed publications).
    stale_after_seconds: float = 1800.0
    keep_top: int = 1000
    k_max: int = 1000
    default_k: int = 10
    # The policy an answer uses when the request names none, and the policies every snapshot
    # is ranked with (a request may pick any of them with ?policy=).
    policy: str = "v1"
    policies: tuple[str, ...] = POLICIES
    # The shelves' scoring version an answer uses when the request names none, and the versions
    # every publication of the shelves scores with (v1 always among them); a version can also be
    # backfilled into kept snapshots (POST /internal/rebuild) before it is published or served.
    scoring_version: str = "v1"
    scoring_versions: tuple[str, ...] = ("v1",)
    snapshot_retention: int = 24
    load_batch_rows: int = 200_000
    # How many parts of each batch are applied side by side, each through its own connection
    # on its own core (ingest/load.py): the events are split by a hash of the board's key, so
    # every copy of one event_id is in one part. Default: the core count.
    ingest_lanes: int = field(default_factory=lambda: os.cpu_count() or 1)
    # ... but only into parts of at least this many rows: an insert through a chain costs
    # ~75 ms however few rows it holds (its views' plans), which a small batch would pay twice.
    ingest_lane_rows: int = 20_000
    # How often an API process asks the registry for a new snapshot. Embedded, none by
    # default: no other process can publish, and every in-process publication tells the cache.
    cache_poll_seconds: float = 1.0
    # Kafka: empty brokers means no Kafka. Embedded mode consumes in-process (ingest/consumer.py);
    # server mode renders the Kafka engine table (sql/0009) from these same settings.
    kafka_brokers: str = ""
    kafka_topic: str = "listens"
    kafka_group: str = "toplist"
    kafka_consumers: int = 1
    kafka_batch_rows: int = 200_000
    # How long a consumer gathers a batch: the live boards (`Board.publish_on_arrival`) for
    # `kafka_batch_seconds`, the others (published on a refresh of 10 s and more) for
    # `kafka_bulk_batch_seconds`: an insert through a board's chain has a fixed cost (~0.1 s
    # however few rows), so those boards pay it a quarter as often, and the CPU goes to the
    # boards that must move within seconds.
    kafka_batch_seconds: float = 0.5
    kafka_bulk_batch_seconds: float = 2.0
    # The nice value (0-19) the engine's threads take while they publish the charts and
    # shelves or apply their batches, so that on a busy machine the live boards go first
    # (ClickHouse's os_thread_priority; it takes effect where the process has CAP_SYS_NICE,
    # and is ignored elsewhere). 0: as the engine's other threads.
    bulk_thread_priority: int = 10
    # The nice value (-20 up to bulk_thread_priority) of the live boards' publications and of
    # their consumers' half-second batches: below 0, they go before the engine's background
    # merges, the API workers and the consumers too. Their runs are paced to at most half the
    # time (publish/scheduler.py `Paced`), and a bigger batch of theirs (a load, a backlog)
    # runs at 0 (`thread_priority`), so they cannot hold a core. 0: as every other thread.
    live_thread_priority: int = -5
    # The other boards' topics (the charts' is kafka_topic); each board consumes its own topic
    # as consumer group `<kafka_group>-<board>`.
    kafka_topic_listeners: str = "playbacks"
    kafka_topic_sale: str = "orders"
    kafka_topic_popular: str = "item_events"
    # How often each other board is published: live listeners every 2 s and the flash sale
    # every second (their contracts: within 5 s, within a second or two; bench.freshness
    # measures what they give), the marketplace shelves (whose shortest window is 1m) every 10 s.
    listeners_refresh_seconds: float = 2.0
    sale_refresh_seconds: float = 1.0
    popular_refresh_seconds: float = 10.0
    # A playback with no report for this long stops counting (0: playbacks never expire).
    listeners_expiry_seconds: int = 0
    # Live listeners' state is kept for the current hour and this many before it (sql/0019): a
    # report older than that no longer counts, and is dropped (0: kept for good).
    listeners_retention_hours: int = 24
    # Rows kept per board in a snapshot of the other boards. A shelf keeps more than the
    # largest k it serves, so that items filtered out when read still leave it full.
    board_keep_top: int = 1000
    popular_keep_top: int = 300
    popular_k_max: int = 100
    # A restaurant's public shelf (GET /v1/restaurants/<id>/popular-items) answers from its
    # fallback list (top items by all-time orders) when the shelves' snapshot is older than
    # this, and widens its window (1d -> 7d -> 28d -> featured items) while the restaurant has
    # fewer than shelf_min_orders orders in it.
    shelf_fallback_after_seconds: float = 86_400.0
    shelf_min_orders: int = 20
    # Raw messages as received, kept for audit, replay and crash repair (sql/0010).
    incoming_log_days: int = 7
    # An event that arrives more than this after its event_time is kept in raw but never
    # counted (sql/0011); 0 means no horizon: every late event counts.
    late_horizon_seconds: int = 0
    # The time rule every board shares (sql/0020): an event_time more than this ahead of the
    # event's arrival is a dead letter.
    max_future_seconds: int = 86_400
    # Raw events expire this many days after their event_time; 0 keeps them for good.
    raw_ttl_days: int = 0
    # How long a correction with "publish": true waits for the publisher's new snapshot.
    publish_wait_seconds: float = 30.0
    # Bearer token for /internal/* (corrections). Empty: the internal endpoints refuse all.
    internal_token: str = field(default="", repr=False)
    # Where each board's current snapshot is written as a file for the API worker processes
    # (toplist/snapshots.py). Embedded, by default beside the data directory
    # (`<data dir>-snapshots`); in server mode none unless set (workers read the registry).
    snapshot_dir: Path | None = None
    dbt_project_dir: Path = PROJECT_ROOT
    dbt_profiles_dir: Path = PROJECT_ROOT / "dbt_project"

    def __post_init__(self) -> None:
        if not _IDENTIFIER.fullmatch(self.database):
            raise ConfigError(f"TOPLIST_DATABASE must be a plain identifier, got {self.database!r}")
        if self.database.lower() in _RESERVED_DATABASES:
            raise ConfigError(
                f"TOPLIST_DATABASE {self.database!r} is one of ClickHouse's own databases"
                f" ({', '.join(sorted(_RESERVED_DATABASES))}); choose another name"
            )
        if self.clickhouse_cluster and not _IDENTIFIER.fullmatch(self.clickhouse_cluster):
            raise ConfigError(
                "TOPLIST_CLICKHOUSE_CLUSTER must be a plain identifier,"
                f" got {self.clickhouse_cluster!r}"
            )
        if self.clickhouse_cluster and self.embedded:
            raise ConfigError(
                "TOPLIST_CLICKHOUSE_CLUSTER needs a ClickHouse server URL"
                " (TOPLIST_CLICKHOUSE_URL=http://...); the embedded engine is one node"
            )
        if self.policy not in POLICIES:
            raise ConfigError(f"TOPLIST_POLICY must be one of {POLICIES}, got {self.policy!r}")
        unknown = [policy for policy in self.policies if policy not in POLICIES]
        if unknown or not self.policies:
            raise ConfigError(
                f"TOPLIST_POLICIES must list policies from {POLICIES}, got {self.policies!r}"
            )
        if self.policy not in self.policies:
            raise ConfigError(
                f"TOPLIST_POLICY ({self.policy}) must be one of TOPLIST_POLICIES {self.policies}"
            )
        if self.scoring_version not in SCORINGS:
            raise ConfigError(
                f"TOPLIST_SCORING_VERSION must be one of {SCORINGS}, got {self.scoring_version!r}"
            )
        if not set(self.scoring_versions) <= set(SCORINGS) or "v1" not in self.scoring_versions:
            raise ConfigError(
                f"TOPLIST_SCORING_VERSIONS must list versions from {SCORINGS}, v1 among them"
                f" (a restaurant's shelf counts its orders by it), got {self.scoring_versions!r}"
            )
        if self.k_max > self.keep_top:
            raise ConfigError(
                f"TOPLIST_K_MAX ({self.k_max}) cannot exceed TOPLIST_KEEP_TOP ({self.keep_top}):"
                " a snapshot only holds the top TOPLIST_KEEP_TOP rows"
            )
        if not 0 <= self.bulk_thread_priority <= 19:
            raise ConfigError(
                "TOPLIST_BULK_THREAD_PRIORITY is a nice value from 0 (as the engine's other"
                f" threads) to 19, got {self.bulk_thread_priority}"
            )
        if not -20 <= self.live_thread_priority <= self.bulk_thread_priority:
            raise ConfigError(
                "TOPLIST_LIVE_THREAD_PRIORITY is a nice value from -20 up to"
                f" TOPLIST_BULK_THREAD_PRIORITY ({self.bulk_thread_priority}): the live boards"
                f" never go after the others; got {self.live_thread_priority}"
            )
        if not 1 <= self.default_k <= self.k_max:
            raise ConfigError(f"TOPLIST_DEFAULT_K must lie in 1..{self.k_max}")
        brokers = self.kafka_brokers.split(",") if self.kafka_brokers else []
        if not all(_BROKER.fullmatch(broker) for broker in brokers):
            raise ConfigError(
                "TOPLIST_KAFKA_BROKERS must be host:port[,host:port...],"
                f" got {self.kafka_brokers!r}"
            )
        if self.popular_k_max > self.popular_keep_top:
            raise ConfigError(
                f"TOPLIST_POPULAR_K_MAX ({self.popular_k_max}) cannot exceed"
                f" TOPLIST_POPULAR_KEEP_TOP ({self.popular_keep_top})"
            )
        if self.shelf_min_orders > self.popular_keep_top:
            # A restaurant's orders in a window are summed from its kept list: exact below
            # the kept depth, and at least the kept depth when the list is full.
            raise ConfigError(
                f"TOPLIST_SHELF_MIN_ORDERS ({self.shelf_min_orders}) cannot exceed"
                f" TOPLIST_POPULAR_KEEP_TOP ({self.popular_keep_top})"
            )
        for name, value in (
            ("TOPLIST_KAFKA_TOPIC", self.kafka_topic),
            ("TOPLIST_KAFKA_GROUP", self.kafka_group),
            ("TOPLIST_KAFKA_TOPIC_LISTENERS", self.kafka_topic_listeners),
            ("TOPLIST_KAFKA_TOPIC_SALE", self.kafka_topic_sale),
            ("TOPLIST_KAFKA_TOPIC_POPULAR", self.kafka_topic_popular),
        ):
            if not _KAFKA_NAME.fullmatch(value):
                raise ConfigError(f"{name} must match [A-Za-z0-9._-]{{1,249}}, got {value!r}")

    # A board's own settings, by the names its registry entry gives (toplist/boards.py).

    def topic(self, board: str) -> str:
        """The Kafka topic of a board."""
        return getattr(self, find_board(board).topic_setting)

    def group(self, board: str) -> str:
        """The consumer group of a board's topic."""
        return self.kafka_group + find_board(board).group_suffix

    def refresh_seconds(self, board: str) -> float:
        """How often a board is published."""
        return getattr(self, find_board(board).refresh_setting)

    def batch_seconds(self, board: str) -> float:
        """How long the embedded consumer of a board gathers a batch before writing it."""
        live = find_board(board).publish_on_arrival
        return self.kafka_batch_seconds if live else self.kafka_bulk_batch_seconds

    def thread_priority(self, board: str, *, backlog: bool = False) -> int:
        """The nice value of the engine's threads publishing `board` or applying its batches:
        `live_thread_priority` for the live boards, `bulk_thread_priority` for the others. A
        `backlog` (a batch big enough to be split: a load, a consumer catching up) never goes
        above the engine's other work: 0 at most."""
        if not find_board(board).publish_on_arrival:
            return self.bulk_thread_priority
        return max(0, self.live_thread_priority) if backlog else self.live_thread_priority

    def stale_after(self, board: str) -> float:
        """When a board's snapshot is reported stale: its own setting, or three missed
        refreshes."""
        setting = find_board(board).stale_setting
        return getattr(self, setting) if setting else 3 * self.refresh_seconds(board)

    def keep_top_of(self, board: str) -> int:
        """How many rows a snapshot of a board keeps per list."""
        return getattr(self, find_board(board).keep_top_setting)

    @property
    def snapshot_files(self) -> Path | None:
        """The directory of this database's snapshot files (`<snapshot_dir>/<database>`), or
        None when snapshots are not written as files."""
        if self.snapshot_dir is not None:
            return self.snapshot_dir / self.database
        if self.embedded:
            data = chdb_path(self.clickhouse_url)
            return data.with_name(data.name + "-snapshots") / self.database
        return None

    @property
    def embedded(self) -> bool:
        return self.clickhouse_url.startswith("chdb:")

    @property
    def kafka_engine(self) -> bool:
        """Server mode with brokers configured: ClickHouse's Kafka engine consumes the topic."""
        return bool(self.kafka_brokers) and not self.embedded

    @property
    def repair_after_seconds(self) -> float:
        """How old an unfinished batch must be before a writer repairs it (ingest/load.py).

        Embedded, one process owns the data: any unfinished batch was cut off. On a server,
        other writers may have batches in flight, so only batches five minutes old are.
        """
        return 0.0 if self.embedded else 300.0

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides: object) -> Config:
        env = dict(os.environ if env is None else env)
        base = cls()
        config = replace(
            base,
            clickhouse_url=env.get("TOPLIST_CLICKHOUSE_URL") or base.clickhouse_url,
            database=env.get("TOPLIST_DATABASE") or base.database,
            clickhouse_cluster=env.get("TOPLIST_CLICKHOUSE_CLUSTER", "").strip(),
            publish_interval_seconds=_float(
                env, "TOPLIST_PUBLISH_INTERVAL_SECONDS", base.publish_interval_seconds
            ),
            stale_after_seconds=_float(
                env, "TOPLIST_STALE_AFTER_SECONDS", base.stale_after_seconds
            ),
            keep_top=_int(env, "TOPLIST_KEEP_TOP", base.keep_top),
            k_max=_int(env, "TOPLIST_K_MAX", base.k_max),
            default_k=_int(env, "TOPLIST_DEFAULT_K", base.default_k),
            policy=env.get("TOPLIST_POLICY") or base.policy,
            policies=_names(env, "TOPLIST_POLICIES", base.policies),
            scoring_version=env.get("TOPLIST_SCORING_VERSION") or base.scoring_version,
            scoring_versions=_names(env, "TOPLIST_SCORING_VERSIONS", base.scoring_versions),
            snapshot_retention=_int(env, "TOPLIST_SNAPSHOT_RETENTION", base.snapshot_retention),
            load_batch_rows=_int(env, "TOPLIST_LOAD_BATCH_ROWS", base.load_batch_rows),
            ingest_lanes=_int(env, "TOPLIST_INGEST_LANES", base.ingest_lanes),
            ingest_lane_rows=_int(env, "TOPLIST_INGEST_LANE_ROWS", base.ingest_lane_rows),
            cache_poll_seconds=_float(env, "TOPLIST_CACHE_POLL_SECONDS", base.cache_poll_seconds),
            kafka_brokers=env.get("TOPLIST_KAFKA_BROKERS", base.kafka_brokers).strip(),
            kafka_topic=env.get("TOPLIST_KAFKA_TOPIC") or base.kafka_topic,
            kafka_group=env.get("TOPLIST_KAFKA_GROUP") or base.kafka_group,
            kafka_consumers=_int(env, "TOPLIST_KAFKA_CONSUMERS", base.kafka_consumers),
            kafka_batch_rows=_int(env, "TOPLIST_KAFKA_BATCH_ROWS", base.kafka_batch_rows),
            kafka_batch_seconds=_float(
                env, "TOPLIST_KAFKA_BATCH_SECONDS", base.kafka_batch_seconds
            ),
            kafka_bulk_batch_seconds=_float(
                env, "TOPLIST_KAFKA_BULK_BATCH_SECONDS", base.kafka_bulk_batch_seconds
            ),
            bulk_thread_priority=_int(
                env, "TOPLIST_BULK_THREAD_PRIORITY", base.bulk_thread_priority, minimum=0
            ),
            live_thread_priority=_int(
                env, "TOPLIST_LIVE_THREAD_PRIORITY", base.live_thread_priority, minimum=-20
            ),
            kafka_topic_listeners=env.get("TOPLIST_KAFKA_TOPIC_LISTENERS")
            or base.kafka_topic_listeners,
            kafka_topic_sale=env.get("TOPLIST_KAFKA_TOPIC_SALE") or base.kafka_topic_sale,
            kafka_topic_popular=env.get("TOPLIST_KAFKA_TOPIC_POPULAR") or base.kafka_topic_popular,
            listeners_refresh_seconds=_float(
                env, "TOPLIST_LISTENERS_REFRESH_SECONDS", base.listeners_refresh_seconds
            ),
            sale_refresh_seconds=_float(
                env, "TOPLIST_SALE_REFRESH_SECONDS", base.sale_refresh_seconds
            ),
            popular_refresh_seconds=_float(
                env, "TOPLIST_POPULAR_REFRESH_SECONDS", base.popular_refresh_seconds
            ),
            listeners_expiry_seconds=_int(
                env, "TOPLIST_LISTENERS_EXPIRY_SECONDS", base.listeners_expiry_seconds, minimum=0
            ),
            listeners_retention_hours=_int(
                env, "TOPLIST_LISTENERS_RETENTION_HOURS", base.listeners_retention_hours, minimum=0
            ),
            board_keep_top=_int(env, "TOPLIST_BOARD_KEEP_TOP", base.board_keep_top),
            popular_keep_top=_int(env, "TOPLIST_POPULAR_KEEP_TOP", base.popular_keep_top),
            popular_k_max=_int(env, "TOPLIST_POPULAR_K_MAX", base.popular_k_max),
            shelf_fallback_after_seconds=_float(
                env, "TOPLIST_SHELF_FALLBACK_AFTER_SECONDS", base.shelf_fallback_after_seconds
            ),
            shelf_min_orders=_int(env, "TOPLIST_SHELF_MIN_ORDERS", base.shelf_min_orders),
            incoming_log_days=_int(env, "TOPLIST_INCOMING_LOG_DAYS", base.incoming_log_days),
            late_horizon_seconds=_int(
                env, "TOPLIST_LATE_HORIZON_SECONDS", base.late_horizon_seconds, minimum=0
            ),
            max_future_seconds=_int(
                env, "TOPLIST_MAX_FUTURE_SECONDS", base.max_future_seconds, minimum=0
            ),
            raw_ttl_days=_int(env, "TOPLIST_RAW_TTL_DAYS", base.raw_ttl_days, minimum=0),
            publish_wait_seconds=_float(
                env, "TOPLIST_PUBLISH_WAIT_SECONDS", base.publish_wait_seconds
            ),
            internal_token=env.get("TOPLIST_INTERNAL_TOKEN", base.internal_token).strip(),
            snapshot_dir=Path(env["TOPLIST_SNAPSHOT_DIR"])
            if env.get("TOPLIST_SNAPSHOT_DIR", "").strip()
            else base.snapshot_dir,
        )
        if config.embedded and not env.get("TOPLIST_CACHE_POLL_SECONDS"):
            config = replace(config, cache_poll_seconds=math.inf)
        return replace(config, **overrides) if overrides else config
