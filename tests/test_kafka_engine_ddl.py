"""Server mode's Kafka engine DDL (sql/0009): rendered from configuration, parsed by ClickHouse.

chDB cannot create a Kafka engine table, so the table statement is checked with ClickHouse's
own parser (formatQuery), and its materialized view is run for real over a stand-in table
that has the Kafka engine's virtual columns with their documented types.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from toplist.boards import BOARDS
from toplist.config import Config, ConfigError
from toplist.migrate import MigrationError, discover, render

KAFKA_VIRTUAL_COLUMNS = """
    message String,
    _topic LowCardinality(String),
    _key String,
    _offset UInt64,
    _partition UInt64,
    _timestamp Nullable(DateTime),
    _timestamp_ms Nullable(DateTime64(3)),
    _raw_message String,
    _error String
"""


def kafka_migration(version: int = 9):
    (migration,) = [m for m in discover() if m.requires == "kafka_engine" and m.version == version]
    return migration


def server_config(config: Config) -> Config:
    return replace(
        config,
        clickhouse_url="http://clickhouse:8123",
        kafka_brokers="kafka-1:9092,kafka-2:9092",
        kafka_topic="listens",
        kafka_group="toplist-prod",
        kafka_consumers=4,
    )


def format_query(client, sql: str) -> str:
    """ClickHouse's own parser: an error if `sql` does not parse, else the normalised text."""
    return client.query("SELECT formatQuery({q:String})", parameters={"q": sql}).result_rows[0][0]


def test_the_rendered_kafka_engine_table_parses_with_the_configured_settings(client, config):
    server = server_config(config)
    table, view = kafka_migration().statements(server)
    formatted = format_query(client, table)
    assert f"CREATE TABLE IF NOT EXISTS {config.database}.listens_kafka" in formatted
    for setting in (
        "ENGINE = Kafka",
        "kafka_broker_list = 'kafka-1:9092,kafka-2:9092'",
        "kafka_topic_list = 'listens'",
        "kafka_group_name = 'toplist-prod'",
        "kafka_format = 'JSONAsString'",
        "kafka_num_consumers = 4",
        "kafka_handle_error_mode = 'stream'",
    ):
        assert setting in formatted, f"{setting} missing from the rendered DDL"
    assert "FROM " + config.database + ".listens_kafka" in format_query(client, view)


def test_the_kafka_view_writes_the_columns_of_the_incoming_table(client, config):
    db = config.database
    _, view = kafka_migration().statements(server_config(config))
    client.command(f"CREATE TABLE {db}.listens_kafka ({KAFKA_VIRTUAL_COLUMNS}) ENGINE = Null")
    client.command(view)

    described = client.query(f"DESCRIBE TABLE {db}.listens_kafka_mv").result_rows
    incoming = client.query(f"DESCRIBE TABLE {db}.listens_incoming").result_rows
    assert [(r[0], r[1]) for r in described] == [(r[0], r[1]) for r in incoming]

    good = '{"event_id":"k1","song_id":"s","user_id":"u","country":"SE","event_time":1764590000000}'
    client.command(
        f"""
        INSERT INTO {db}.listens_kafka
        (message, _topic, _key, _offset, _partition, _timestamp_ms, _raw_message, _error) VALUES
        ('{good}', 'listens', 'k1', 41, 3, fromUnixTimestamp64Milli(1764590000123), '', ''),
        ('', 'listens', '', 42, 3, NULL, 'not json', 'Cannot parse JSON object')
        """
    )
    listen = client.query(
        f"SELECT event_id, _topic, _partition, _offset, toUnixTimestamp64Milli(_timestamp),"
        f" _source FROM {db}.listens"
    ).result_rows
    assert listen == [("k1", "listens", 3, 41, 1764590000123, "kafka-engine")]
    dead = client.query(
        f"SELECT raw_message, _offset, _source FROM {db}.listens_dead_letters"
    ).result_rows
    assert dead == [("not json", 42, "kafka-engine")], "a broken message must be dead-lettered"


def test_the_other_boards_topics_render_into_their_own_kafka_tables(client, config):
    """0018: one Kafka engine table per board topic and group, each feeding its board's
    incoming table, where a good message becomes a raw event and a broken one a dead letter."""
    db = config.database
    server = replace(
        server_config(config),
        kafka_topic_listeners="playbacks-prod",
        kafka_topic_sale="orders-prod",
        kafka_topic_popular="item-events-prod",
    )
    statements = kafka_migration(18).statements(server)
    tables = [format_query(client, sql) for sql in statements if " TABLE " in sql]
    for (table, topic, board), formatted in zip(
        [
            ("playbacks", "playbacks-prod", "listeners"),
            ("orders", "orders-prod", "sale"),
            ("item_events", "item-events-prod", "popular"),
        ],
        tables,
        strict=True,
    ):
        assert f"{db}.{table}_kafka" in formatted and "ENGINE = Kafka" in formatted
        assert f"kafka_topic_list = '{topic}'" in formatted
        assert f"kafka_group_name = 'toplist-prod-{board}'" in formatted
    for table in ("playbacks", "orders", "item_events"):
        client.command(f"CREATE TABLE {db}.{table}_kafka ({KAFKA_VIRTUAL_COLUMNS}) ENGINE = Null")
    for view in (sql for sql in statements if "MATERIALIZED VIEW" in sql):
        client.command(view)
    good = (
        '{"event_id":"o1","order_id":"o1","product_id":"p","buyer_id":"b","units":2,'
        '"amount_cents":300,"event_time":1764590000000}'
    )
    client.command(
        f"""
        INSERT INTO {db}.orders_kafka
        (message, _topic, _key, _offset, _partition, _timestamp_ms, _raw_message, _error) VALUES
        ('{good}', 'orders-prod', 'o1', 7, 1, NULL, '', ''),
        ('', 'orders-prod', '', 8, 1, NULL, 'nope', 'Cannot parse JSON object')
        """
    )
    order = client.query(f"SELECT event_id, units, _offset, _source FROM {db}.orders")
    assert order.result_rows == [("o1", 2, 7, "kafka-engine")]
    dead = client.query(f"SELECT raw_message, _offset FROM {db}.orders_dead_letters")
    assert dead.result_rows == [("nope", 8)]


@pytest.mark.embedded_only
def test_embedded_mode_leaves_the_kafka_engine_unapplied(client, config):
    tables = client.command(
        f"SELECT count() FROM system.tables WHERE database = '{config.database}'"
        " AND name LIKE '%_kafka%'"
    )
    recorded = client.command(
        f"SELECT count() FROM {config.database}.schema_migrations WHERE version IN (9, 18)"
    )
    assert (tables, recorded) == (0, 0), "chDB cannot run the Kafka engine; it must be skipped"
    assert not replace(config, kafka_brokers="127.0.0.1:9092").kafka_engine


@pytest.mark.parametrize(
    "overrides",
    [
        {"TOPLIST_KAFKA_BROKERS": "kafka:9092' , kafka_format = 'CSV"},
        {"TOPLIST_KAFKA_TOPIC": "listens'"},
        {"TOPLIST_KAFKA_GROUP": "a group"},
        {"TOPLIST_KAFKA_TOPIC": "listens\n"},  # a trailing newline passes a plain "$"
        {"TOPLIST_DATABASE": "toplist\n"},
    ],
)
def test_kafka_settings_that_could_break_the_ddl_are_refused(overrides):
    with pytest.raises(ConfigError):
        Config.from_env(overrides)


def test_an_unknown_placeholder_is_an_error(config):
    with pytest.raises(MigrationError, match="unknown placeholder"):
        render("CREATE TABLE ${database}.t (${colum} String)", config)


@pytest.mark.parametrize("consumers, threads", [(4, 1), (1, 0)])
def test_several_kafka_engine_consumers_get_a_thread_each(client, config, consumers, threads):
    """Without kafka_thread_per_consumer the consumers of a Kafka table share one thread and a
    second one reads nothing more (ClickHouse issue 35153): 0023 recreates every board's Kafka
    table with it whenever TOPLIST_KAFKA_CONSUMERS is above 1, and its view with it."""
    server = replace(server_config(config), kafka_consumers=consumers)
    statements = kafka_migration(23).statements(server)
    tables = [s for s in statements if s.startswith("CREATE TABLE")]
    views = [s for s in statements if s.startswith("CREATE MATERIALIZED VIEW")]
    assert len(tables) == len(views) == len(BOARDS)
    for table in tables:
        formatted = format_query(client, table)
        assert f"kafka_num_consumers = {consumers}" in formatted, formatted
        assert f"kafka_thread_per_consumer = {threads}" in formatted, formatted
    for board in BOARDS.values():
        (view,) = [v for v in views if f".{board.prefix}_kafka_mv" in v]
        assert f"TO {config.database}.{board.incoming}" in format_query(client, view)
        first = "CREATE MATERIALIZED VIEW IF NOT EXISTS"
        (before,) = [
            s
            for s in kafka_migration(9 if board.prefix == "listens" else 18).statements(server)
            if s.startswith(f"{first} {config.database}.{board.prefix}_kafka_mv")
        ]
        assert view.split("AS SELECT", 1)[1] == before.split("AS SELECT", 1)[1], (
            f"{board.name}: the recreated view reads otherwise than the one it replaces"
        )
