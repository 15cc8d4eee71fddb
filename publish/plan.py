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
from datetime import UTC, datetime
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
_FORMAT = 1  # of the stored plans; a change here compiles them again

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
        client.command(step.statement(moment))


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
            plan = [Step(**step) for step in json.loads(path.read_text(encoding="utf-8"))]
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
    ordered: list[str] = []

    def visit(unique_id: str) -> None:
        if unique_id in ordered or unique_id not in nodes:
            return
        for upstream in nodes[unique_id].depends_on.nodes:
            visit(upstream)
        ordered.append(unique_id)

    for unique_id in sorted(nodes):
        visit(unique_id)
    plan = [_step(nodes[unique_id]) for unique_id in ordered]
    if not any(f"'{PLACEHOLDER}'" in step.sql for step in plan):
        raise dbt.DbtError(f"{board.name}: no model of the plan reads the as_of var")
    log.info("compiled the %s publication plan: %d models", board.name, len(plan))
    return plan


def _step(node) -> Step:  # type: ignore[no-untyped-def]
    materialized = node.config.materialized
    if materialized == "view":
        return Step(node.relation_name, "view", node.compiled_code)
    if materialized != "table":
        raise dbt.DbtError(f"{node.unique_id}: a plan builds views and tables, not {materialized}")
    order_by = node.config.get("order_by") or "tuple()"
    if isinstance(order_by, list):
        order_by = ", ".join(order_by)
    return Step(
        node.relation_name,
        "table",
        node.compiled_code,
        engine=node.config.get("engine") or "MergeTree()",
        order_by=order_by,
        # dbt-clickhouse's own table setting (it turns insert deduplication off for tables).
        settings="SETTINGS replicated_deduplication_window = '0'",
    )
