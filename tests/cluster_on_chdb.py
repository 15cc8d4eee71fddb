"""Run the cluster rendering of the migrations in ClickHouse's own engine (chDB), as one node.

    python tests/cluster_on_chdb.py DIR

chDB is clickhouse-local: it has no distributed DDL queue and never activates a replica, but
it does create Replicated tables (against its in-process test Keeper), Distributed tables
over a `remote_servers` cluster, KeeperMap tables and materialized views, so it checks what
parsing cannot: engine arguments, Keeper paths with their macros, Distributed definitions
and every view's columns against its target. This script is that node: DIR gets a config
with the macros `shard=1`, `replica=r1`, a test Keeper and the cluster `toplist` (one shard
whose one replica, localhost:9000, nothing serves), and each statement that `toplist migrate`
renders for the cluster runs without its `ON CLUSTER` clause, which is the statement every
node runs. Kafka engine tables are left out (chDB has no Kafka engine; DESIGN.md).

It prints one JSON line: the statements run, the failures (statement, code, message) and the
engine of every table created. It runs in a process of its own, as chDB owns one data
directory per process and its Keeper client never shuts down (closing the engine waits
forever), so the script leaves it open and ends with os._exit once it has printed.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CLUSTER = "toplist"
NODE_CONFIG = f"""<clickhouse>
  <zookeeper><implementation>testkeeper</implementation></zookeeper>
  <macros><shard>1</shard><replica>r1</replica></macros>
  <keeper_map_path_prefix>/keeper_map_tables</keeper_map_path_prefix>
  <remote_servers>
    <{CLUSTER}>
      <shard>
        <internal_replication>true</internal_replication>
        <replica><host>localhost</host><port>9000</port></replica>
      </shard>
    </{CLUSTER}>
  </remote_servers>
</clickhouse>
"""


def open_node(directory: Path):
    """The node's engine. Keep it open: chDB's close waits forever on its Keeper client."""
    import chdb.state.sqlitelike as chdb

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.xml").write_text(NODE_CONFIG)
    return chdb.connect(f"{directory / 'data'}?config-file={directory / 'config.xml'}")


def run(engine) -> dict:
    from toplist.config import Config
    from toplist.migrate import render_plan

    config = Config(
        clickhouse_url="http://clickhouse:8123", database="toplist", clickhouse_cluster=CLUSTER
    )
    statements, failures = [], []
    for _, rendered in render_plan(config):
        for statement in rendered:
            local = statement.replace(f" ON CLUSTER '{CLUSTER}'", "")
            statements.append(local)
            try:
                engine.query(local)
            except Exception as error:  # noqa: BLE001 (every failure is reported)
                message = str(error)
                code = re.search(r"Code: (\d+)\.", message)
                failures.append(
                    {
                        "statement": local,
                        "code": int(code.group(1)) if code else None,
                        "message": message.strip().splitlines()[0][:500],
                    }
                )
    tables = engine.query(
        "SELECT name, engine FROM system.tables WHERE database = 'toplist' FORMAT JSONEachRow",
        "JSONEachRow",
    )
    engines = {}
    for line in tables.bytes().decode().splitlines():
        row = json.loads(line)
        engines[row["name"]] = row["engine"]
    return {"statements": statements, "failures": failures, "engines": engines}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    node = open_node(Path(sys.argv[1]))
    print(json.dumps(run(node)), flush=True)
    os._exit(0)
