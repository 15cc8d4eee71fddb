"""A board's build as the SQL dbt compiles for it, run without dbt at each publication.

dbt stays the one definition of every ranking: analysts run `dbt build`, and a publication
runs what dbt compiled from the same models. What a publication leaves out is dbt's own cost
per run (starting, checking its parse, compiling, about a second), not any SQL.

* Compiling: for a board's selection (`+<rankings> +<summary>`), dbt compiles every model once,
  with the as_of vars set to a placeholder moment (`PLACEHOLDER`), so the compiled text holds
  the as_of in one recognisable literal; the plan is each model's compiled SQL, in the order of
  its dependencies, with how dbt-clickhouse materializes it (view or table, engine, order).
* Running: the placeholder is replaced by the publication's as_of (now, when none is given, as
  the models' `now64()` would), and each model is built in one statement, as dbt-clickhouse
  builds it: `CREATE OR REPLACE VIEW`, or `CREATE OR REPLACE TABLE ... AS SELECT`, which swaps
  the new table in whole.
* Staying the same SQL: the plan is compiled again whenever a file dbt parses, a var the
  configuration sets, the engine settings dbt reads or the installed dbt changes; it is kept
  under the project's `target/` (`toplist-plans/`), so a new process (`toplist publish`) runs
  it without importing dbt. `tests/test_publication_plan.py` holds the plan's tables and
  snapshots equal to `dbt run`'s on every board.

* Moving what is kept: a model that reads var `windows_from` (the charts' window sums,
  models/intermediate/int_listens__windowed.sql) is compiled a second time with it set, and
  that SQL moves the sums the table holds from the as_of they were built at to the new one,
  instead of building them whole. The table's comment says what it holds (`Kept`): the
  moment it was built at, the last block of the written table read then, and the identity of
  every table the model reads. A publication moves the sums when the comment says they are
  whole and less than a day older than the new moment, and the tables are the ones they
  were read from (a rebuild swaps new ones in); otherwise, and while a move is under way (a
  crash leaves the comment empty), it builds them whole. `tests/test_window_sums.py` holds
  moved sums equal to whole ones through late events, voids, repairs and rebuilds.

On a ClickHouse cluster, where dbt-clickhouse creates and swaps each model ON CLUSTER with
replicated engines, publications keep running dbt (`usable`).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import threading
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from clickhouse_connect.driver.client import Client

from publish import dbt
from toplist.boards import Board
from toplist.config import Config
from toplist.snapshots import utc

log = logging.getLogger(__name__)

# The as_of a plan is compiled at: a moment no publication uses, written as dbt_vars writes
# every as_of, so it stands in the compiled SQL as one literal.
PLACEHOLDER = "1999-12-31 23:59:59.123457"
# What a moving model is compiled with for the moment its kept rows were built at, and for
# the last block of the written table that build read (publish/plan.py, "Moving").
SINCE_PLACEHOLDER = "1999-12-30 23:59:59.123457"
BLOCK_PLACEHOLDER = 999_999_999_999_999
MOVES_AT_MOST = timedelta(days=1)  # further apart, the sums are built whole
_FORMAT = 2  # of the stored plans; a change here compiles them again

_lock = threading.Lock()
_plans: dict[str, list[Step]] = {}  # plan key -> steps, in this process


@dataclass(frozen=True)
class Step:
    """One model: its relation (`db`.`name`), how it is materialized and its compiled SQL."""

    relation: str
    materialized: str  # view or table
    sql: str
    engine: str = ""
    order_by: str = ""
    settings: str = ""
    # A model that moves what it keeps: the SQL of the rows that move it, the table whose new
    # blocks it reads (`changed`) and every table it reads, to tell when one was replaced.
    moving_sql: str = ""
    written: str = ""
    reads: tuple[str, ...] = ()

    def statement(self, as_of: str) -> str:
        sql = self.sql.replace(f"'{PLACEHOLDER}'", f"'{as_of}'")
        if self.materialized == "view":
            return f"CREATE OR REPLACE VIEW {self.relation} AS (\n{sql}\n)"
        return (
            f"CREATE OR REPLACE TABLE {self.relation}\nENGINE = {self.engine}\n"
            f"ORDER BY ({self.order_by})\n{self.settings}\nAS (\n{sql}\n)"
        )


def usable(config: Config) -> bool:
    """Whether publications run the plan: everywhere but on a cluster."""
    return not config.clickhouse_cluster


def run(client: Client, config: Config, board: Board, as_of: datetime | None) -> None:
    """Build the board's models at `as_of` (default now) from its compiled plan."""
    moment = utc(as_of or datetime.now(UTC)).strftime(dbt.AS_OF_FORMAT)
    for step in steps(config, board):
        if step.moving_sql:
            _build_moving(client, step, moment)
        else:
            client.command(step.statement(moment))


@dataclass(frozen=True)
class Kept:
    """What a moving model's table holds, as its comment says: built at `moment`, having read
    the written table up to its block `block`, from `tables` (name -> UUID), by the SQL whose
    digest is `sql`."""

    moment: str
    block: int
    tables: dict[str, str]
    sql: str

    @classmethod
    def read(cls, comment: str) -> Kept | None:
        try:
            return cls(**json.loads(comment))
        except (ValueError, TypeError):
            return None  # no comment (built by dbt, or a move under way), or another's

    def text(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def _build_moving(client: Client, step: Step, moment: str) -> None:
    """Build a moving model's table at `moment`: moved from what it keeps when that can be
    (the module's "Moving"), else whole; then say in its comment what it holds."""
    database, name = (part.strip("`") for part in step.relation.split(".", 1))
    rows = client.query(
        "SELECT name, toString(uuid), comment FROM system.tables"
        " WHERE database = {db:String} AND name IN {names:Array(String)}",
        parameters={"db": database, "names": [name, *step.reads]},
    ).result_rows
    identities = {table: uuid for table, uuid, _ in rows}
    comment = next((text for table, _, text in rows if table == name), "")
    block = int(
        client.command(
            "SELECT max(toUInt64(splitByChar('_', name)[3])) FROM system.parts"
            " WHERE database = {db:String} AND table = {table:String}",
            parameters={"db": database, "table": step.written},
        )
        or 0
    )
    now = Kept(
        moment=moment,
        block=block,
        tables={table: identities.get(table, "") for table in step.reads},
        sql=hashlib.sha256((step.sql + step.moving_sql).encode()).hexdigest()[:16],
    )
    kept = Kept.read(comment)
    if (
        kept is not None
        and (kept.tables, kept.sql) == (now.tables, now.sql)
        and kept.block <= block  # the written table's blocks were not numbered anew
        and kept.moment <= moment
        and _moment(moment) - _moment(kept.moment) <= MOVES_AT_MOST
    ):
        _say(client, step.relation, "")  # a move under way: if it stops, build whole next
        moving = (
            step.moving_sql.replace(f"'{PLACEHOLDER}'", f"'{moment}'")
            .replace(f"'{SINCE_PLACEHOLDER}'", f"'{kept.moment}'")
            .replace(str(BLOCK_PLACEHOLDER), str(kept.block))
        )
        client.command(f"INSERT INTO {step.relation}\n{moving}")
        if _identity(client, database, name) != identities.get(name):
            # replaced meanwhile (`dbt build`): its comment stays empty, so the next is whole
            log.warning("%s was replaced while its sums moved", step.relation)
            return
        log.debug("moved %s from %s to %s", step.relation, kept.moment, moment)
    else:
        client.command(step.statement(moment))
    _say(client, step.relation, now.text())


def _identity(client: Client, database: str, name: str) -> str:
    return str(
        client.command(
            "SELECT toString(uuid) FROM system.tables"
            " WHERE database = {db:String} AND name = {name:String}",
            parameters={"db": database, "name": name},
        )
    )


def _say(client: Client, relation: str, comment: str) -> None:
    quoted = comment.replace("\\", "\\\\").replace("'", "\\'")
    client.command(f"ALTER TABLE {relation} MODIFY COMMENT '{quoted}'")


def _moment(text: str) -> datetime:
    return datetime.strptime(text, dbt.AS_OF_FORMAT)


def steps(config: Config, board: Board) -> list[Step]:
    """The board's plan for this configuration and project, compiled when it is not kept."""
    key = plan_key(config, board)
    with _lock:
        if key in _plans:
            return _plans[key]
        path = (
            Path(config.dbt_project_dir) / "target" / "toplist-plans" / f"{board.name}-{key}.json"
        )
        if path.exists():
            plan = [
                Step(**step | {"reads": tuple(step.get("reads", ()))})
                for step in json.loads(path.read_text(encoding="utf-8"))
            ]
        else:
            plan = compile_plan(config, board)
            _keep(path, board.name, plan)
        if len(_plans) > 16:
            _plans.clear()
        _plans[key] = plan
        return plan


def _keep(path: Path, board: str, plan: list[Step]) -> None:
    """Store the plan for the next process, replacing the board's older plans; a project
    directory that cannot be written only costs the next process a compile."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for old in path.parent.glob(f"{board}-*.json"):
            old.unlink(missing_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps([asdict(step) for step in plan]), encoding="utf-8")
        partial.replace(path)  # whole or not at all, for another process reading it
    except OSError as error:
        log.warning("could not keep the publication plan in %s: %s", path.parent, error)


def plan_key(config: Config, board: Board) -> str:
    """What the compiled SQL depends on: every file dbt parses, the vars, the environment the
    profiles read, the installed dbt and dbt-clickhouse."""
    from importlib.metadata import version

    digest = hashlib.sha256()
    for path, _, _ in dbt.project_files(config):
        digest.update(path.encode() + b"\0")
        file = Path(path)
        digest.update(file.read_bytes() if file.exists() else b"-")
    described = {
        "board": board.name,
        "vars": dbt.dbt_vars(config, None),
        "environment": dbt.dbt_environment(config),
        "versions": [version("dbt-core"), version("dbt-clickhouse")],
        "placeholder": PLACEHOLDER,
        "format": _FORMAT,
    }
    digest.update(json.dumps(described, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def compile_plan(config: Config, board: Board) -> list[Step]:
    """Ask dbt to compile the board's models at the placeholder as_of; order them."""
    values = dbt.dbt_vars(config, None) | {"as_of": PLACEHOLDER, "board_as_of": PLACEHOLDER}
    selection = f"+{board.rankings} +{board.summary}"
    with contextlib.redirect_stdout(io.StringIO()):  # dbt compile prints what it compiled
        result = dbt.invoke(
            config,
            ["compile", "--select", selection, "--vars", repr(values)],
            quiet=True,
            reuse_parse=True,
        )
    nodes = {r.node.unique_id: r.node for r in result.results if r.node.resource_type == "model"}
    # dbt compiles into the one parsed manifest, so the next compile replaces these texts
    compiled = {unique_id: node.compiled_code for unique_id, node in nodes.items()}
    moving = _moving_nodes(config, selection, values, compiled)
    ordered: list[str] = []

    def visit(unique_id: str) -> None:
        if unique_id in ordered or unique_id not in nodes:
            return
        for upstream in nodes[unique_id].depends_on.nodes:
            visit(upstream)
        ordered.append(unique_id)

    for unique_id in sorted(nodes):
        visit(unique_id)
    plan = [
        _step(nodes[unique_id], compiled[unique_id], moving.get(unique_id), nodes)
        for unique_id in ordered
    ]
    if not any(f"'{PLACEHOLDER}'" in step.sql for step in plan):
        raise dbt.DbtError(f"{board.name}: no model of the plan reads the as_of var")
    log.info("compiled the %s publication plan: %d models", board.name, len(plan))
    return plan


def _moving_nodes(config: Config, selection: str, values: dict, compiled: dict) -> dict:
    """The models whose SQL changes when var `windows_from` is set: each one's moving node
    (`compiled`: each model's SQL without it)."""
    values = values | {"windows_from": SINCE_PLACEHOLDER, "windows_read_block": BLOCK_PLACEHOLDER}
    with contextlib.redirect_stdout(io.StringIO()):
        result = dbt.invoke(
            config,
            ["compile", "--select", selection, "--vars", repr(values)],
            quiet=True,
            reuse_parse=True,
        )
    return {
        r.node.unique_id: r.node
        for r in result.results
        if r.node.unique_id in compiled and r.node.compiled_code != compiled[r.node.unique_id]
    }


def _sources(node, nodes: dict) -> list[str]:  # type: ignore[no-untyped-def]
    """The tables (dbt sources) `node` reads, directly or through the models it reads."""
    found: list[str] = []
    for upstream in node.depends_on.nodes:
        if upstream.startswith("source."):
            found.append(upstream.rsplit(".", 1)[1])
        elif upstream in nodes:
            found += _sources(nodes[upstream], nodes)
    return sorted(set(found))


def _step(node, sql: str, moving, nodes: dict) -> Step:  # type: ignore[no-untyped-def]
    materialized = node.config.materialized
    if materialized == "view":
        return Step(node.relation_name, "view", sql)
    if materialized != "table":
        raise dbt.DbtError(f"{node.unique_id}: a plan builds views and tables, not {materialized}")
    order_by = node.config.get("order_by") or "tuple()"
    if isinstance(order_by, list):
        order_by = ", ".join(order_by)
    moves = {}
    if moving is not None:
        written = [
            up.rsplit(".", 1)[1] for up in moving.depends_on.nodes if up.startswith("source.")
        ]
        if len(written) != 1 or str(BLOCK_PLACEHOLDER) not in moving.compiled_code:
            raise dbt.DbtError(
                f"{node.unique_id}: a moving model reads the new blocks of one source table"
            )
        moves = {
            "moving_sql": moving.compiled_code,
            "written": written[0],
            "reads": tuple(sorted(set(_sources(moving, nodes)) | set(written))),
        }
    return Step(
        node.relation_name,
        "table",
        sql,
        engine=node.config.get("engine") or "MergeTree()",
        order_by=order_by,
        # dbt-clickhouse's own table setting (it turns insert deduplication off for tables).
        settings="SETTINGS replicated_deduplication_window = '0'",
        **moves,
    )
