"""The migrations as rendered for one node and for a cluster (toplist/cluster.py).

Snapshot tests: `tests/snapshots/ddl_single.sql` and `ddl_cluster.sql` hold every statement
`toplist migrate` runs on an empty database in server mode with Kafka, for one server and for
the cluster `toplist` of docker/compose.cluster.yml; a change to the migrations or the rules
shows up in review as a diff of them (TOPLIST_UPDATE_SNAPSHOTS=1 rewrites them). The rules
themselves are checked on the cluster text: ClickHouse's parser accepts every statement, every
MergeTree is Replicated with a Keeper path of its own, every sharded table has its Distributed
table, and the materialized views read and write local tables only. Beyond parsing, ClickHouse's
engine (chDB, as one node of a one-shard cluster: tests/cluster_on_chdb.py) runs the cluster
statements and creates every table and view of them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from toplist.boards import BOARDS
from toplist.cluster import (
    EVERY_NODE,
    KEEPER_MAP,
    NODE_LOCAL,
    SHARDED,
    ClusterRenderer,
    ClusterRenderError,
    render_statement,
)
from toplist.config import Config, ConfigError
from toplist.migrate import TTLS, MigrationError, discover, render_plan, render_text

SNAPSHOTS = Path(__file__).parent / "snapshots"
CLUSTER = "toplist"


def server(cluster: str = "") -> Config:
    """Server mode with Kafka, so the Kafka engine migrations render too."""
    return Config(
        clickhouse_url="http://clickhouse:8123",
        database="toplist",
        kafka_brokers="kafka:9092",
        clickhouse_cluster=cluster,
    )


def cluster_statements() -> list[str]:
    return [s for _, statements in render_plan(server(CLUSTER)) for s in statements]


@pytest.mark.parametrize(
    ("name", "cluster"), [("ddl_single.sql", ""), ("ddl_cluster.sql", CLUSTER)]
)
def test_the_rendered_ddl_matches_its_snapshot(name, cluster):
    rendered = render_text(server(cluster))
    snapshot = SNAPSHOTS / name
    if os.environ.get("TOPLIST_UPDATE_SNAPSHOTS") == "1":
        snapshot.write_text(rendered)
    assert snapshot.exists(), f"no {snapshot}: run TOPLIST_UPDATE_SNAPSHOTS=1 pytest {__file__}"
    assert rendered == snapshot.read_text(), (
        f"the rendered DDL differs from tests/snapshots/{name}: review the difference, then"
        " TOPLIST_UPDATE_SNAPSHOTS=1 pytest tests/test_cluster_ddl.py"
    )


def test_one_node_renders_the_migrations_unchanged():
    single = render_plan(server())
    wanted = [m for m in discover() if m.wanted(server())]
    assert [m for m, _ in single[1:]] == wanted
    for migration, statements in single[1:]:
        assert statements == migration.statements(server())
    assert not any("ON CLUSTER" in s or "Replicated" in s for _, ss in single for s in ss)


def test_every_cluster_statement_parses_in_clickhouse(client):
    for statement in cluster_statements():
        formatted = client.query(
            "SELECT formatQuery({q:String})", parameters={"q": statement}
        ).result_rows[0][0]
        assert formatted, statement


# What one chDB node cannot do, by error code: write to a Replicated table (its replicas stay
# read-only: clickhouse-local never activates them), and reach the cluster's other nodes.
READ_ONLY_REPLICA = 242
UNREACHABLE = {210, 279}
MISSING_COLUMN = {8, 47}
UNKNOWN_TABLE = 60
NO_SUCH_COLUMN = 16
PROJECTION_REFUSED = 344  # the table's projection settings are an ALTER that read-only refused
MUTATION_NOT_ASSIGNED = 236  # ABORTED: a replica that never activates assigns no mutation


def test_clickhouse_creates_every_table_and_view_of_the_cluster_rendering(tmp_path):
    helper = Path(__file__).with_name("cluster_on_chdb.py")
    done = subprocess.run(
        [sys.executable, str(helper), str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    node = json.loads(done.stdout.strip().splitlines()[-1])
    assert node["statements"] == [
        s.replace(f" ON CLUSTER '{CLUSTER}'", "")
        for _, ss in render_plan(
            Config(
                clickhouse_url="http://clickhouse:8123",
                database="toplist",
                clickhouse_cluster=CLUSTER,
            )
        )
        for s in ss
    ]

    # Every failure is one a single chDB node must have: the ALTERs of replicated tables, the
    # INSERT through a Distributed table, the mutations (MATERIALIZE) a replica that never
    # activates cannot assign, and views that name a column those ALTERs add.
    unadded, unset, failed = set(), set(), set()
    for failure in node["failures"]:
        statement, code = failure["statement"], failure["code"]
        if code == READ_ONLY_REPLICA and statement.startswith("ALTER TABLE"):
            unadded.update(re.findall(r"ADD COLUMN IF NOT EXISTS (\w+)", statement))
            if "MODIFY SETTING" in statement:
                unset.update(re.findall(r"^ALTER TABLE toplist\.(\w+)", statement))
            continue
        projected = re.match(r"ALTER TABLE toplist\.(\w+)\nADD PROJECTION", statement)
        if code == PROJECTION_REFUSED and projected and projected.group(1) in unset:
            continue
        if code == MUTATION_NOT_ASSIGNED and re.search(r"^MATERIALIZE ", statement, re.M):
            continue
        if code in UNREACHABLE and statement.startswith("INSERT INTO"):
            continue
        missing = re.findall(r"No such column (\w+)", failure["message"])
        if code == NO_SUCH_COLUMN and statement.startswith("INSERT INTO"):
            if unadded.intersection(missing):
                continue  # a copy into a column that a read-only replica's ALTER did not add
        altered = re.match(r"ALTER TABLE toplist\.(\w+)", statement)
        if code == UNKNOWN_TABLE and altered and altered.group(1) in failed:
            continue  # a later change to a view that could not be created, as above
        named = re.findall(r"[`'](\w+)[`']", failure["message"])
        if code in MISSING_COLUMN and unadded.intersection(named):
            failed.update(
                re.findall(r"^CREATE MATERIALIZED VIEW IF NOT EXISTS toplist\.(\w+)", statement)
            )
            continue
        pytest.fail(f"ClickHouse refused {statement[:300]!r}: {failure['message']}")
    assert unadded, "no read-only replica: the note above no longer holds, so tighten the test"

    engines = node["engines"]
    existing = _tables(node["statements"], existing=True)
    for name, statement in existing.items():
        rendered = re.search(r"ENGINE = (\w+)", statement).group(1)
        assert engines.get(name) == rendered, f"{name}: {engines.get(name)}, not {rendered}"
    views = re.findall(
        r"^CREATE MATERIALIZED VIEW IF NOT EXISTS toplist\.(\w+)",
        "\n".join(node["statements"]),
        re.M,
    )
    for name in set(views) - failed - _dropped(node["statements"]):
        assert engines.get(name) == "MaterializedView", name
    assert sum(e.startswith("Replicated") for e in engines.values()) >= 25
    assert sum(e == "Distributed" for e in engines.values()) == len(set(SHARDED) & set(existing))


def test_every_statement_that_changes_the_schema_runs_on_every_node():
    for statement in cluster_statements():
        if statement.startswith("INSERT"):
            continue  # data, through the Distributed tables, once
        assert f"ON CLUSTER '{CLUSTER}'" in statement.split("\n")[0], statement[:200]


def _tables(statements: list[str], *, existing: bool = False) -> dict[str, str]:
    """Each table's CREATE; with `existing`, only of the tables no later statement drops."""
    tables = {}
    for statement in statements:
        match = re.match(r"CREATE TABLE IF NOT EXISTS toplist\.(\w+) ", statement)
        if match:
            tables[match.group(1)] = statement
    gone = _dropped(statements) if existing else set()
    return {name: statement for name, statement in tables.items() if name not in gone}


def _dropped(statements: list[str]) -> set[str]:
    """The tables and views a statement drops after the last statement that creates them."""
    gone = set()
    for statement in statements:
        created = re.match(
            r"CREATE (TABLE|MATERIALIZED VIEW) IF NOT EXISTS toplist\.(\w+)", statement
        )
        if created:
            gone.discard(created.group(2))
        dropped = re.match(r"DROP TABLE IF EXISTS toplist\.(\w+) ", statement)
        if dropped:
            gone.add(dropped.group(1))
    return gone


def test_every_mergetree_is_replicated_with_a_keeper_path_of_its_own():
    paths = {}
    for name, statement in _tables(cluster_statements()).items():
        engine = re.search(r"ENGINE = (\w+)(\('([^']*)')?", statement)
        assert engine, statement[:200]
        if "MergeTree" not in engine.group(1):
            continue
        assert engine.group(1).startswith("Replicated"), f"{name} is not replicated"
        path = engine.group(3)
        assert path not in paths, f"{name} and {paths.get(path)} share the Keeper path {path}"
        paths[path] = name
        if name.endswith("_local"):
            assert path == f"/clickhouse/tables/{{shard}}/toplist/{name}", name
        else:
            assert name in EVERY_NODE, f"{name}: a whole table is one of EVERY_NODE"
            assert path == f"/clickhouse/tables/all/toplist/{name}", name
    assert len(paths) >= len(EVERY_NODE) + 20


def test_every_sharded_table_is_local_tables_under_a_distributed_one():
    tables = _tables(cluster_statements())
    for name, key in SHARDED.items():
        assert f"{name}_local" in tables, f"{name} has no local table"
        distributed = tables[name]
        assert f"AS toplist.{name}_local\n" in distributed
        assert f"ENGINE = Distributed('{CLUSTER}', 'toplist', '{name}_local', {key})" in (
            distributed
        )
    placed = set(SHARDED) | EVERY_NODE | NODE_LOCAL | KEEPER_MAP
    created = {name.removesuffix("_local") for name in tables}
    assert created == placed, "the placement lists name tables no migration creates"
    assert "ENGINE = KeeperMap('/toplist/settings')" in tables["settings"]
    for stream in BOARDS.values():  # a board's shard key is the key its producers send
        for way_in in (stream.incoming, stream.log):
            assert SHARDED[way_in] == (
                f"cityHash64(JSONExtractString(raw_message, '{stream.key}'))"
            ), way_in


def test_each_kafka_table_is_on_every_node_and_its_view_routes_through_the_shards():
    statements = cluster_statements()
    kafka = {re.search(r"toplist\.(\w+)", s).group(1) for s in statements if "ENGINE = Kafka" in s}
    assert len(kafka) == 4, "one Kafka engine table per board's topic (0023 creates them again)"
    views = {}
    for statement in statements:
        match = re.match(
            r"CREATE MATERIALIZED VIEW IF NOT EXISTS toplist\.(\w+) .*\nTO toplist\.(\w+)",
            statement,
        )
        if match:
            sources = re.findall(r"\b(?:FROM|JOIN) toplist\.(\w+)", statement)
            views[match.group(1)] = (match.group(2), sources)
    for name, (target, sources) in views.items():
        if any(source.endswith("_kafka") for source in sources):
            assert target.endswith("_incoming") and target in SHARDED, (name, target)
            continue
        assert target not in SHARDED, f"{name} writes the Distributed table {target}"
        distributed = [source for source in sources if source in SHARDED]
        assert not distributed, f"{name} reads the Distributed tables {distributed}"
    assert len(views) >= 25


def test_a_table_without_a_place_on_the_cluster_is_refused(tmp_path):
    renderer = ClusterRenderer(CLUSTER, "toplist")
    with pytest.raises(ClusterRenderError, match="new_board has no place on a cluster"):
        renderer.render("CREATE TABLE toplist.new_board (x UInt8) ENGINE = MergeTree ORDER BY x")
    for migration in discover():
        (tmp_path / migration.path.name).write_text(migration.text)
    (tmp_path / "0999_new_board.sql").write_text(
        "CREATE TABLE ${database}.new_board (x UInt8) ENGINE = MergeTree ORDER BY x;\n"
    )
    render_plan(server(), tmp_path)  # one node: nothing to place
    with pytest.raises(MigrationError, match="0999_new_board.sql cannot be rendered"):
        render_plan(server(CLUSTER), tmp_path)


def test_the_crash_repair_deletes_from_every_nodes_local_tables():
    ids = "SELECT event_id FROM toplist.listens_incoming_log WHERE _batch_id = {b:UUID}"
    delete = f"DELETE FROM toplist.listens WHERE event_id IN ({ids})"
    assert render_statement(CLUSTER, "toplist", delete) == (
        f"DELETE FROM toplist.listens_local ON CLUSTER '{CLUSTER}' WHERE event_id IN"
        " (SELECT event_id FROM toplist.listens_incoming_log_local WHERE _batch_id = {b:UUID})"
    )
    assert render_statement("", "toplist", delete) == delete
    for stream in BOARDS.values():  # every table the repair deletes from has a place
        for table in (
            stream.raw,
            stream.dead_letters,
            "ingest_batches",
            stream.ids or "listen_ids",
        ):
            render_statement(CLUSTER, "toplist", f"DELETE FROM toplist.{table} WHERE 1")
    snapshot = "DELETE FROM toplist.board_entries WHERE snapshot_id = 'x'"
    assert render_statement(CLUSTER, "toplist", snapshot) == snapshot, "replicated: one delete"


def test_the_configured_ttls_are_set_on_every_nodes_local_tables(client):
    """`toplist migrate` sets and removes the TTLs (raw events, live listeners' state) at run
    time: on a cluster each goes to the local tables that hold the rows, on every node."""
    for ttl in TTLS:
        assert ttl.table in SHARDED, ttl.table
        for value in (3, 0):
            alter = ttl.alter("toplist", value)
            rendered = render_statement(CLUSTER, "toplist", alter)
            assert rendered == (
                f"ALTER TABLE toplist.{ttl.table}_local ON CLUSTER '{CLUSTER}'\n"
                + alter.removeprefix(f"ALTER TABLE toplist.{ttl.table} ")
            )
            parsed = client.query(
                "SELECT formatQuery({q:String})", parameters={"q": rendered}
            ).result_rows[0][0]  # as ClickHouse's parser reads it
            assert parsed.startswith(
                f"ALTER TABLE toplist.{ttl.table}_local ON CLUSTER {CLUSTER}\n"
            ), parsed
            assert ("MODIFY TTL" if value else "REMOVE TTL") in parsed, parsed
            assert render_statement("", "toplist", alter) == alter


def test_a_cluster_needs_a_server_and_a_plain_name():
    with pytest.raises(ConfigError, match="needs a ClickHouse server URL"):
        Config(clickhouse_url="chdb:///tmp/x", clickhouse_cluster="toplist")
    with pytest.raises(ConfigError, match="plain identifier"):
        server("toplist' OR 1")
