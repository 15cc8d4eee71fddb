"""The migrations rendered for a ClickHouse cluster (TOPLIST_CLICKHOUSE_CLUSTER).

The files in `sql/` are written for one node and stay the only source: when a cluster is
configured, each statement is rewritten here, by the rules below, and the same files build
both layouts (`toplist migrate --render [--cluster NAME]` prints either). Every table of the
schema has one of three places on a cluster, named in the tables below; a migration that
creates a table with none is refused, so a new table is placed on purpose.

* Sharded (`SHARDED`): the ingest chain of each board, raw events, dead letters and the
  aggregates. The table is created as `<name>_local` on every node, with a Replicated engine
  whose Keeper path holds `{shard}` (the two replicas of a shard share it), and `<name>`
  becomes a Distributed table over the local ones. Everything that reads or writes by the
  plain name (dbt, the publisher, the API, `toplist load`, dashboards) sees the whole cluster;
  the materialized views read and write the local tables, so each event's chain runs on the
  node that received it. The way in (`<board>_incoming`, `_incoming_log`) is sharded by the
  event's key, the event_id (a user_id for playback reports): every copy of an event lands on
  one shard, so the exact dedup of listens (`listen_ids`, per node) sees all of its copies,
  and `FINAL` per shard is exact across the cluster.
* On every node whole (`EVERY_NODE`): snapshots, the catalog, `schema_migrations`. A
  Replicated engine with a Keeper path without `{shard}`: all nodes are replicas of one
  table, so the publisher writes a snapshot once and every API process reads it locally.
* Node-local (`NODE_LOCAL`): the Null tables between parse and raw, the Kafka engine tables
  (one per node, in one consumer group, so the topic's partitions spread over the nodes) and
  the id sets `listen_ids`, `order_ids`, `item_event_ids` (EmbeddedRocksDB: the ids seen by
  the replica that runs the chain).

`settings` becomes a KeeperMap table, so every node reads the same values. Materialized
views, functions and ALTERs are created `ON CLUSTER`; a view fed by a Kafka table writes to
the Distributed incoming table, which routes each message to its shard.
"""

from __future__ import annotations

import re

from toplist.boards import BOARDS


# table -> the sharding key of its Distributed table. A board's way in is keyed like its
# events' Kafka messages (the registry's `key`); tables that only the materialized views write
# are keyed at random (their Distributed table is for reading, and for the rare direct insert
# of a correction). Every board's tables are placed from its registry entry.
def _by_field(field: str) -> str:
    return f"cityHash64(JSONExtractString(raw_message, '{field}'))"


SHARDED = {"ingest_batches": "rand()"}
NODE_LOCAL: set[str] = set()
for _board in BOARDS.values():
    SHARDED.update(
        {
            _board.incoming: _by_field(_board.key),
            _board.log: _by_field(_board.key),
            _board.done: "rand()",
            _board.dead_letters: "rand()",
            _board.raw: f"cityHash64({_board.key})",
        }
    )
    SHARDED.update({table: "rand()" for table, _ in _board.aggregates})
    if _board.voids:  # voided ids, beside the raw events they void
        SHARDED[_board.voids] = "cityHash64(event_id)"
    # The Null tables between parse and raw, the Kafka engine table, the id set (and the
    # name it was rebuilt under, 0022).
    NODE_LOCAL |= {f"{_board.prefix}_parsed", f"{_board.prefix}_kafka"}
    if _board.ids:
        NODE_LOCAL |= {f"{_board.prefix}_checked", _board.ids, f"{_board.ids}_next"}

# Aggregates that earlier migrations created and a later one dropped (0029): still placed, so
# that every migration renders.
SHARDED["item_activity_by_minute"] = "rand()"

EVERY_NODE = {
    "schema_migrations",
    "chart_entries",
    "chart_snapshots",
    "board_entries",
    "board_entries_0033",  # board_entries partitioned by snapshot, swapped in (0033)
    "board_snapshots",
    "catalog_items",
    "publication_leases",
    "publication_requests",
    "internal_jobs",
}
KEEPER_MAP = {"settings"}

_CREATE_TABLE = re.compile(
    r"^CREATE TABLE (IF NOT EXISTS )?(?P<db>\w+)\.(?P<name>\w+)\s+(?P<rest>.*)$", re.S
)
_COPY = re.compile(r"^AS (?P<db>\w+)\.(?P<source>\w+)$")
_ENGINE = re.compile(r"\bENGINE\s*=\s*(?P<engine>\w+)(?P<args>\([^()]*\))?", re.S)
_CREATE_VIEW = re.compile(
    r"^CREATE MATERIALIZED VIEW (IF NOT EXISTS )?(?P<db>\w+)\.(?P<name>\w+)\s+"
    r"TO (?P=db)\.(?P<target>\w+)(?P<rest>.*)$",
    re.S,
)
_CREATE_FUNCTION = re.compile(
    r"^CREATE (?P<replace>OR REPLACE )?FUNCTION (IF NOT EXISTS )?(?P<name>\w+)\s+(?P<rest>AS .*)$",
    re.S,
)
_CREATE_DATABASE = re.compile(r"^CREATE DATABASE (IF NOT EXISTS )?(?P<name>\w+)$")
_ALTER = re.compile(r"^ALTER TABLE (?P<db>\w+)\.(?P<name>\w+)\s+(?P<rest>.*)$", re.S)
_DROP = re.compile(r"^DROP TABLE (IF EXISTS )?(?P<db>\w+)\.(?P<name>\w+)$")
_DROP_FUNCTION = re.compile(r"^DROP FUNCTION (IF EXISTS )?(?P<name>\w+)$")
_RENAME = re.compile(r"^RENAME TABLE (?P<db>\w+)\.(?P<name>\w+) TO (?P=db)\.(?P<to>\w+)$")
_EXCHANGE = re.compile(r"^EXCHANGE TABLES (?P<db>\w+)\.(?P<name>\w+) AND (?P=db)\.(?P<other>\w+)$")
_DELETE = re.compile(r"^DELETE FROM (?P<db>\w+)\.(?P<name>\w+)\s+(?P<rest>WHERE .*)$", re.S)
_COLUMN_CHANGE = re.compile(r"^(ADD|DROP|MODIFY|RENAME|COMMENT) COLUMN\b")


def _clauses(alter: str) -> list[str]:
    """The comma-separated clauses of an ALTER's body (commas inside brackets are kept)."""
    clauses, depth, start = [], 0, 0
    for i, char in enumerate(alter):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            clauses.append(alter[start:i].strip())
            start = i + 1
    clauses.append(alter[start:].strip())
    return clauses


class ClusterRenderError(ValueError):
    """A statement that the cluster rules do not cover."""


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class ClusterRenderer:
    """Rewrites single-node statements for `cluster`, one at a time and in migration order
    (a table copied with `CREATE TABLE t AS s` takes the storage recorded for `s`)."""

    def __init__(self, cluster: str, database: str) -> None:
        self.cluster = cluster
        self.database = database
        self.on_cluster = f"ON CLUSTER {_quote(cluster)}"
        self.storage: dict[str, str] = {}  # single-node storage clause of each table seen
        self.views: set[str] = set()

    # -- names ---------------------------------------------------------------------------
    def local(self, name: str) -> str:
        return f"{name}_local" if name in SHARDED else name

    def _localize(self, sql: str, keep: str | None = None) -> str:
        """Every sharded table the statement names, as its local table (but `keep`)."""

        def swap(match: re.Match[str]) -> str:
            name = match.group(1)
            return match.group(0) if name == keep else f"{self.database}.{self.local(name)}"

        return re.sub(rf"\b{re.escape(self.database)}\.(\w+)\b", swap, sql)

    def _place(self, name: str) -> str:
        for place, names in (
            ("sharded", SHARDED),
            ("every node", EVERY_NODE),
            ("node-local", NODE_LOCAL),
            ("keeper map", KEEPER_MAP),
        ):
            if name in names:
                return place
        raise ClusterRenderError(
            f"table {name} has no place on a cluster: add it to one of SHARDED, EVERY_NODE,"
            " NODE_LOCAL or KEEPER_MAP in toplist/cluster.py"
        )

    # -- engines -------------------------------------------------------------------------
    def _engine(self, name: str, storage: str) -> str:
        """The storage clause of table `name` on the cluster."""
        match = _ENGINE.search(storage)
        if match is None:
            raise ClusterRenderError(f"table {name}: no ENGINE clause")
        engine, args = match.group("engine"), (match.group("args") or "()")[1:-1].strip()
        place = self._place(name)
        if engine.endswith("MergeTree") and not engine.startswith("Replicated"):
            if place == "sharded":
                path = f"/clickhouse/tables/{{shard}}/{self.database}/{self.local(name)}"
            elif place == "every node":
                path = f"/clickhouse/tables/all/{self.database}/{name}"
            else:
                raise ClusterRenderError(
                    f"table {name} ({engine}) must be sharded or on every node"
                )
            replicated = f"Replicated{engine}({_quote(path)}, '{{replica}}'"
            replicated += f", {args})" if args else ")"
            return storage[: match.start()] + f"ENGINE = {replicated}" + storage[match.end() :]
        if place == "keeper map":
            if engine != "EmbeddedRocksDB":
                raise ClusterRenderError(f"table {name}: only EmbeddedRocksDB becomes KeeperMap")
            keeper = f"KeeperMap({_quote(f'/{self.database}/{name}')})"
            return storage[: match.start()] + f"ENGINE = {keeper}" + storage[match.end() :]
        if engine in ("Null", "Kafka", "EmbeddedRocksDB") and place in ("sharded", "node-local"):
            return storage
        raise ClusterRenderError(f"table {name}: engine {engine} has no cluster form here")

    def _distributed(self, name: str) -> str:
        db, local = self.database, self.local(name)
        return (
            f"CREATE TABLE IF NOT EXISTS {db}.{name} {self.on_cluster} AS {db}.{local}\n"
            f"ENGINE = Distributed({_quote(self.cluster)}, {_quote(db)}, {_quote(local)},"
            f" {SHARDED[name]})"
        )

    # -- statements ----------------------------------------------------------------------
    def render(self, statement: str) -> list[str]:
        """One single-node statement as the statements to run on the cluster."""
        sql = statement.strip()
        for kind, pattern in (
            (self._database, _CREATE_DATABASE),
            (self._table, _CREATE_TABLE),
            (self._view, _CREATE_VIEW),
            (self._function, _CREATE_FUNCTION),
            (self._alter, _ALTER),
            (self._delete, _DELETE),
            (self._drop, _DROP),
            (self._drop_function, _DROP_FUNCTION),
            (self._rename, _RENAME),
            (self._exchange, _EXCHANGE),
        ):
            match = pattern.match(sql)
            if match:
                return kind(match)
        if sql.startswith("INSERT INTO "):
            return [sql]  # through the Distributed tables, from one node
        raise ClusterRenderError(f"no cluster rule for: {sql.splitlines()[0][:120]}")

    def _database(self, match: re.Match[str]) -> list[str]:
        return [f"CREATE DATABASE IF NOT EXISTS {match.group('name')} {self.on_cluster}"]

    def _table(self, match: re.Match[str]) -> list[str]:
        db, name, rest = match.group("db"), match.group("name"), match.group("rest")
        copy = _COPY.match(rest.strip())
        if copy:
            source = copy.group("source")
            if source not in self.storage:
                raise ClusterRenderError(f"{name} copies {source}, which no migration created")
            if self._place(name) != self._place(source):
                raise ClusterRenderError(f"{name} copies {source} but is placed differently")
            self.storage[name] = self.storage[source]
            rest = f"AS {db}.{self.local(source)}\n{self._engine(name, self.storage[source])}"
        else:
            engine = _ENGINE.search(rest)
            if engine is None:
                raise ClusterRenderError(f"table {name}: no ENGINE clause")
            self.storage[name] = rest[engine.start() :]
            rest = rest[: engine.start()] + self._engine(name, rest[engine.start() :])
        statements = [
            f"CREATE TABLE IF NOT EXISTS {db}.{self.local(name)} {self.on_cluster}\n{rest}"
        ]
        if name in SHARDED:
            statements.append(self._distributed(name))
        return statements

    def _view(self, match: re.Match[str]) -> list[str]:
        db, name, target, rest = (match.group(k) for k in ("db", "name", "target", "rest"))
        self.views.add(name)
        reads_kafka = any(
            source.endswith("_kafka") and source in NODE_LOCAL
            for source in re.findall(rf"\bFROM {re.escape(db)}\.(\w+)", rest)
        )
        # A view over a Kafka table sends each message through the Distributed incoming table
        # to its shard; every other view stays on its node.
        to = target if reads_kafka else self.local(target)
        return [
            f"CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.{name} {self.on_cluster}\n"
            f"TO {db}.{to}{self._localize(rest)}"
        ]

    def _function(self, match: re.Match[str]) -> list[str]:
        create = (
            "CREATE OR REPLACE FUNCTION"
            if match.group("replace")
            else "CREATE FUNCTION IF NOT EXISTS"
        )
        return [f"{create} {match.group('name')} {self.on_cluster}\n{match.group('rest')}"]

    def _alter(self, match: re.Match[str]) -> list[str]:
        db, name, rest = match.group("db"), match.group("name"), match.group("rest")
        if name in self.views:
            return [f"ALTER TABLE {db}.{name} {self.on_cluster}\n{self._localize(rest)}"]
        self._place(name)
        statements = [
            f"ALTER TABLE {db}.{self.local(name)} {self.on_cluster}\n{self._localize(rest)}"
        ]
        columns = [c for c in _clauses(rest) if _COLUMN_CHANGE.match(c)]
        if name in SHARDED and columns:
            # The Distributed table takes the column changes only (no sorting key, no TTL).
            statements.append(f"ALTER TABLE {db}.{name} {self.on_cluster}\n" + ",\n".join(columns))
        return statements

    def _delete(self, match: re.Match[str]) -> list[str]:
        db, name, rest = match.group("db"), match.group("name"), match.group("rest")
        if self._place(name) == "every node":
            return [f"DELETE FROM {db}.{name} {rest}"]  # replicated: one node deletes for all
        return [f"DELETE FROM {db}.{self.local(name)} {self.on_cluster} {self._localize(rest)}"]

    def _drop(self, match: re.Match[str]) -> list[str]:
        db, name = match.group("db"), match.group("name")
        if name in self.views:
            self.views.discard(name)
            return [f"DROP TABLE IF EXISTS {db}.{name} {self.on_cluster} SYNC"]
        self._place(name)
        names = [name, self.local(name)] if name in SHARDED else [name]
        return [f"DROP TABLE IF EXISTS {db}.{table} {self.on_cluster} SYNC" for table in names]

    def _drop_function(self, match: re.Match[str]) -> list[str]:
        return [f"DROP FUNCTION IF EXISTS {match.group('name')} {self.on_cluster}"]

    def _rename(self, match: re.Match[str]) -> list[str]:
        db, name, to = match.group("db"), match.group("name"), match.group("to")
        if self._place(name) != "node-local" or self._place(to) != "node-local":
            raise ClusterRenderError(f"renaming {name}: only node-local tables are renamed here")
        self.storage[to] = self.storage.pop(name)
        return [f"RENAME TABLE {db}.{name} TO {db}.{to} {self.on_cluster}"]

    def _exchange(self, match: re.Match[str]) -> list[str]:
        db, name, other = match.group("db"), match.group("name"), match.group("other")
        if self._place(name) != "every node" or self._place(other) != "every node":
            raise ClusterRenderError(f"exchanging {name}: only tables on every node are swapped")
        self.storage[name], self.storage[other] = self.storage[other], self.storage[name]
        return [f"EXCHANGE TABLES {db}.{name} AND {db}.{other} {self.on_cluster}"]


def render_statement(cluster: str, database: str, statement: str) -> str:
    """One runtime statement (a DELETE or an ALTER of a table created by the migrations) for
    `cluster`, or as it is when no cluster is configured."""
    if not cluster:
        return statement
    statements = ClusterRenderer(cluster, database).render(statement)
    if len(statements) != 1:
        raise ClusterRenderError(f"expected one statement for: {statement[:120]}")
    return statements[0]
