"""Forward-only SQL migrations from `sql/NNNN_name.sql`, recorded in `schema_migrations`.

Each file holds one change, written with `IF NOT EXISTS`, and `${database}` where the
database name goes. Applying is idempotent: a recorded migration is not run again, and a
recorded one whose file has changed since is an error (migrations are never edited; add a
new one instead).

A migration whose first line is `-- requires: kafka_engine` is applied only where ClickHouse
consumes Kafka itself (server mode with TOPLIST_KAFKA_BROKERS set); elsewhere it is left
unapplied and unrecorded, so enabling Kafka later applies it. Such files may also use
`${kafka_brokers}`, `${kafka_topic}` (and the other boards' `${kafka_topic_listeners}`,
`${kafka_topic_sale}`, `${kafka_topic_popular}`), `${kafka_group}`, `${kafka_consumers}` and
`${kafka_thread_per_consumer}` (1 when there is more than one consumer),
rendered from the configuration (validated there, so they are safe inside SQL string
literals), as is `${incoming_log_days}` (a positive integer) in any file.

With TOPLIST_CLICKHOUSE_CLUSTER set, every statement (the bootstrap's too) is rewritten for
that cluster by toplist/cluster.py before it runs: `ON CLUSTER`, Replicated engines, local
tables with Distributed tables over them. `render_plan` gives either layout without a
database, for review and for the snapshot tests of both.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from clickhouse_connect.driver.client import Client

from toplist.boards import BOARDS
from toplist.cluster import ClusterRenderer, ClusterRenderError, render_statement
from toplist.config import PROJECT_ROOT, Config

log = logging.getLogger(__name__)

SQL_DIR = PROJECT_ROOT / "sql"
_MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


class MigrationError(RuntimeError):
    """The migrations on disk and those recorded in the database disagree."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    @property
    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def requires(self) -> str | None:
        first = self.text.split("\n", 1)[0]
        match = re.match(r"^--\s*requires:\s*(\w+)\s*$", first)
        return match.group(1) if match else None

    def wanted(self, config: Config) -> bool:
        if self.requires is None:
            return True
        if self.requires == "kafka_engine":
            return config.kafka_engine
        raise MigrationError(f"{self.path.name} requires {self.requires!r}, which is unknown")

    def statements(self, config: Config) -> list[str]:
        return split_statements(render(self.text, config))


def render(sql: str, config: Config) -> str:
    """Fill in `${database}` and the Kafka settings; any other `${...}` is an error."""
    values = {
        "database": config.database,
        "kafka_brokers": config.kafka_brokers,
        "kafka_topic": config.kafka_topic,
        "kafka_topic_listeners": config.kafka_topic_listeners,
        "kafka_topic_sale": config.kafka_topic_sale,
        "kafka_topic_popular": config.kafka_topic_popular,
        "kafka_group": config.kafka_group,
        "kafka_consumers": str(config.kafka_consumers),
        # More than one consumer needs a thread each to read in parallel (sql/0023).
        "kafka_thread_per_consumer": "1" if config.kafka_consumers > 1 else "0",
        "incoming_log_days": str(config.incoming_log_days),
    }

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise MigrationError(f"unknown placeholder ${{{name}}} in a migration")
        return values[name]

    return re.sub(r"\$\{(\w+)\}", substitute, sql)


def split_statements(sql: str) -> list[str]:
    """Statements end with `;` at the end of a line; comment-only chunks are dropped."""
    statements = []
    for chunk in re.split(r";\s*$", sql, flags=re.MULTILINE):
        code = "\n".join(
            line for line in chunk.strip().splitlines() if not line.strip().startswith("--")
        ).strip()
        if code:
            statements.append(code)
    return statements


def discover(sql_dir: Path = SQL_DIR) -> list[Migration]:
    migrations = []
    for path in sorted(sql_dir.glob("*.sql")):
        match = _MIGRATION_FILE.match(path.name)
        if match:
            migrations.append(Migration(int(match.group(1)), match.group(2), path))
    versions = [m.version for m in migrations]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"two migrations share a version number in {sql_dir}")
    return migrations


def _bootstrap_statements(database: str) -> list[str]:
    return [
        f"CREATE DATABASE IF NOT EXISTS {database}",
        f"""CREATE TABLE IF NOT EXISTS {database}.schema_migrations
(
    version UInt32,
    name String,
    checksum String,
    applied_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = MergeTree
ORDER BY version""",
    ]


def render_plan(
    config: Config, sql_dir: Path = SQL_DIR
) -> list[tuple[Migration | None, list[str]]]:
    """Every statement `migrate` would run on an empty database, per migration (None: the
    bootstrap), rendered for the configured layout: one node, or TOPLIST_CLICKHOUSE_CLUSTER."""
    plan: list[tuple[Migration | None, list[str]]] = [
        (None, _bootstrap_statements(config.database))
    ]
    plan += [(m, m.statements(config)) for m in discover(sql_dir) if m.wanted(config)]
    if not config.clickhouse_cluster:
        return plan
    renderer = ClusterRenderer(config.clickhouse_cluster, config.database)
    rendered = []
    for migration, statements in plan:
        name = migration.path.name if migration else "the bootstrap"
        try:
            rendered.append((migration, [out for s in statements for out in renderer.render(s)]))
        except ClusterRenderError as error:
            raise MigrationError(f"{name} cannot be rendered for a cluster: {error}") from None
    return rendered


def render_text(config: Config, sql_dir: Path = SQL_DIR) -> str:
    """`render_plan` as one SQL text, a header comment before each migration's statements."""
    layout = f"cluster {config.clickhouse_cluster}" if config.clickhouse_cluster else "one node"
    parts = [
        f"-- Generated by `toplist migrate --render`: every statement for {layout}, database"
        f" {config.database}.\n"
    ]
    for migration, statements in render_plan(config, sql_dir):
        parts.append(f"-- {migration.path.name if migration else 'bootstrap'}\n")
        parts.extend(statement + ";\n" for statement in statements)
    return "\n".join(parts)


def applied(client: Client, database: str) -> dict[int, str]:
    rows = client.query(
        f"SELECT version, checksum FROM {database}.schema_migrations ORDER BY version"
    ).result_rows
    return {int(version): checksum for version, checksum in rows}


def migrate(client: Client, config: Config, sql_dir: Path = SQL_DIR) -> list[Migration]:
    """Apply every migration not yet recorded; return the ones applied now."""
    database = config.database
    plan = render_plan(config, sql_dir)
    for statement in plan[0][1]:
        client.command(statement)
    done = applied(client, database)
    ran = []
    for migration, statements in plan[1:]:
        assert migration is not None
        if migration.version in done:
            if done[migration.version] != migration.checksum:
                raise MigrationError(
                    f"{migration.path.name} was changed after it was applied to {database};"
                    " add a new migration instead of editing an applied one"
                )
            continue
        log.info("applying %s", migration.path.name)
        for statement in statements:
            client.command(statement)
        client.insert(
            f"{database}.schema_migrations",
            [[migration.version, migration.name, migration.checksum]],
            column_names=["version", "name", "checksum"],
        )
        ran.append(migration)
    apply_settings(client, config)
    restore_id_sets(client, config)
    return ran


def restore_id_sets(client: Client, config: Config, sample: int = 1000) -> list[str]:
    """Rebuild an id set that lost what it held; return the boards whose sets were rebuilt.

    An id set (`listen_ids`, EmbeddedRocksDB, its own files beside the raw table's) that was
    lost, its files deleted say, would let every re-sent event count again. So each start
    looks up a sample of the raw events' ids in it; if any is missing, the set is refilled
    from the raw events by its own view's query (0022: the id and the fingerprint of the copy
    that counted). Refilling is idempotent. Not on a cluster, where each node holds the ids of
    its shard only and the raw table read here is the whole cluster's.
    """
    if config.clickhouse_cluster:
        return []
    db = config.database
    rebuilt = []
    for board in BOARDS.values():
        if not board.ids:
            continue
        missing = client.command(
            f"""
            SELECT count() FROM (SELECT event_id FROM {db}.{board.raw} LIMIT {int(sample)}) AS raw
            LEFT ANTI JOIN {db}.{board.ids} AS seen ON raw.event_id = seen.event_id
            SETTINGS join_algorithm = 'direct'
            """
        )
        if not int(missing):
            continue
        fill = client.command(
            "SELECT as_select FROM system.tables"
            " WHERE database = {db:String} AND name = {name:String}",
            parameters={"db": db, "name": f"{board.ids}_mv"},
        )
        log.warning(
            "the %s id set %s lacks ids of events in %s (were its files lost?): rebuilding it"
            " from the raw events, so that re-sent events are not counted again",
            board.name,
            board.ids,
            board.raw,
        )
        client.command(f"INSERT INTO {db}.{board.ids} (event_id, fingerprint) {fill}")
        rebuilt.append(board.name)
    return rebuilt


@dataclass(frozen=True)
class _Ttl:
    """A TTL set from the configuration: `setting` (a Config field, 0 for none) on `table`."""

    setting: str
    table: str
    column: str
    what: str
    expires: str  # a log line, with the value
    template: str  # the TTL expression, with the value (plus `extra`)
    extra: int = 0

    def expression(self, value: int) -> str:
        return self.template.format(value=int(value) + self.extra, column=self.column)

    def alter(self, database: str, value: int) -> str:
        """The ALTER that sets the TTL for `value`, or removes it for 0 (as on one node)."""
        change = f"MODIFY TTL {self.expression(value)}" if value else "REMOVE TTL"
        return f"ALTER TABLE {database}.{self.table} {change}"


TTLS = (
    _Ttl(
        "raw_ttl_days", "listens", "event_time", "raw events",
        "raw events now expire %d days after their event_time",
        "toDateTime({column}) + INTERVAL {value} DAY",
    ),
    # The publication reads the current hour and `value` before it. An hour is dropped an
    # hour after the last publication at the current time stopped reading it, so a
    # publication whose as_of was just before the hour turned never finds its oldest hour
    # dropped by a merge under way (the margin costs one hour of state).
    _Ttl(
        "listeners_retention_hours", "playbacks", "hour", "live listeners' state",
        "live listeners' state now kept for the current hour and %d before it",
        "{column} + INTERVAL {value} HOUR", extra=2,
    ),
)  # fmt: skip


def _has_column(client: Client, database: str, table: str, column: str) -> bool:
    return bool(
        client.command(
            "SELECT count() FROM system.columns"
            " WHERE database = {db:String} AND table = {t:String} AND name = {c:String}",
            parameters={"db": database, "t": table, "c": column},
        )
    )


def apply_settings(client: Client, config: Config) -> None:
    """Bring the settings the SQL reads at run time in line with the configuration (0011).

    `late_horizon_seconds` is read by `listens_mv` on every insert, `max_future_seconds` by
    every board's parse view (0020). The TTLs (raw events, live listeners' state) are DDL;
    each is altered only when the configured value differs from the one recorded, since
    changing a TTL rewrites the table's parts.
    """
    database = config.database
    if not client.command(
        "SELECT count() FROM system.tables WHERE database = {db:String} AND name = 'settings'",
        parameters={"db": database},
    ):
        return  # migrations older than 0011 only (a test of the runner itself)
    recorded = dict(client.query(f"SELECT name, value FROM {database}.settings").result_rows)
    wanted = {
        "late_horizon_seconds": config.late_horizon_seconds,
        "max_future_seconds": config.max_future_seconds,
    }
    for ttl in TTLS:
        value = getattr(config, ttl.setting)
        if not _has_column(client, database, ttl.table, ttl.column):
            continue  # migrations older than the TTL's column only (a test of the runner)
        wanted[ttl.setting] = value
        if recorded.get(ttl.setting, 0) == value:
            continue
        if value:
            log.info(ttl.expires, value)
        else:
            log.info("%s: kept for good again (TTL removed)", ttl.what)
        alter = ttl.alter(database, value)
        client.command(render_statement(config.clickhouse_cluster, database, alter))
    changed = [[name, value] for name, value in wanted.items() if recorded.get(name) != value]
    if changed:
        client.insert(f"{database}.settings", changed, column_names=["name", "value"])


def dump_schema(client: Client, database: str) -> str:
    """The whole schema as ClickHouse reports it, one statement per table, for review."""
    names = client.query(
        "SELECT name FROM system.tables WHERE database = {db:String} ORDER BY name",
        parameters={"db": database},
    ).result_rows
    parts = [
        "-- Generated by `toplist migrate --dump-schema`; do not edit. The migrations are the\n"
        "-- source; this file lets a reviewer read the whole schema at once.\n"
    ]
    for (name,) in names:
        ddl = client.raw_query(f"SHOW CREATE TABLE {database}.{name} FORMAT TSVRaw").decode()
        ddl = ddl.replace(f"{database}.", "${database}.")
        parts.append(ddl.strip() + ";\n")
    return "\n".join(parts)
