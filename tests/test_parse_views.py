"""Every board's parse view (sql/0025: one read of a message's JSON) against the one it
replaced (sql/0024's text, whose functions stay in the engine), message by message over
hostile lines: the same verdict and reason for every message, the same values for every one
accepted, on every board, with and without short-circuit evaluation (the embedded writers
turn it off; a server's Kafka engine runs with it on)."""

from __future__ import annotations

import json

import pytest

from toplist.migrate import SQL_DIR, split_statements

RECEIVED_AT = "2026-12-06 12:00:00.000"
TIME = '"2026-12-06T11:59:00Z"'

# Each board's fields with a valid value (as JSON text), in its contract's order.
CONTRACTS = {
    "listens": {
        "event_id": '"e-1"',
        "song_id": '"song-1"',
        "user_id": '"user-1"',
        "country": '"DE"',
        "event_time": TIME,
    },
    "playbacks": {
        "user_id": '"user-1"',
        "playback_id": '"p-1"',
        "song_id": '"song-1"',
        "type": '"START"',
        "version": "3",
        "event_time": TIME,
    },
    "orders": {
        "event_id": '"e-1"',
        "order_id": '"o-1"',
        "product_id": '"p-1"',
        "buyer_id": '"b-1"',
        "units": "2",
        "amount_cents": "1999",
        "event_time": TIME,
    },
    "item_events": {
        "event_id": '"e-1"',
        "item_id": '"i-1"',
        "restaurant_id": '"r-1"',
        "city_id": '"c-1"',
        "type": '"order"',
        "user_id": '"user-1"',
        "event_time": TIME,
    },
}

# Values a careless or hostile producer sends, as JSON text (None: the field is left out).
VALUES = [
    None, "null", "true", "false", "0", "-0", "1", "-1", "2", "1.5", "100.0", "1e2", "1E2",
    "1e13", "1796469083883", "1796469083883.0", "1.796469083883e12", "99999999999",
    "100000000000", "4102444799999", "4102444800000", "-1000", "1000000", "1000001",
    "1000000000000", "1000000000001", "9223372036854775807", "9223372036854775808",
    "-9223372036854775808", "-9223372036854775809", "18446744073709551615",
    "18446744073709551616", "123456789012345678901234567890", '""', '" "', '"x"', '"DE"',
    '"de"', '"D"', '"DEU"', '"5"', '"null"', '"true"', '"é"', '"\\u00e9"', '"\\u0000"',
    '"\\"q\\""', '"a\\nb"', '"\\/"', json.dumps("x" * 128), json.dumps("x" * 129),
    json.dumps("x" * 256), json.dumps("x" * 257), json.dumps("é" * 64), json.dumps("é" * 65),
    "[]", "[1]", '["x"]', "{}", '{"a":1}', '"START"', '"STOP"', '"HEARTBEAT"', '"start"',
    '"view"', '"order"', '"VIEW"', TIME, '"2026-12-06T11:59:00.123+02:00"',
    '"2026-12-06T11:59:00.123456789-11:30"', '"2026-12-06 11:59:00Z"', '"2026-12-06t11:59:00z"',
    '"2026-12-06T11:59:00"', '"2026-12-06"', '"2026-12-06T11:59Z"', '"2016-12-31T23:59:60Z"',
    '"2016-12-31T23:59:60.5+01:00"', '"1970-01-01T00:00:00Z"', '"1969-12-31T23:59:59.999Z"',
    '"2105-12-31T23:59:59.999Z"', '"2106-01-01T00:00:00Z"', '"0001-01-01T00:00:00Z"',
    '"9999-12-31T23:59:59Z"', '"2026-02-30T00:00:00Z"', '"2026-13-01T00:00:00Z"',
    '"2026-12-07T12:00:00Z"', '"2026-12-07T12:00:01Z"', '"2030-01-01T00:00:00Z"',
    '"Sun, 06 Dec 2026 11:59:00 GMT"', '"1796469083883"',
]  # fmt: skip

# Whole messages that are not what any contract asks for.
ODD_MESSAGES = [
    b"", b" ", b"nope", b"null", b"1", b'"s"', b"[]", b"[1,2]", b"{}", b" { } ", b"{\t\r\n}",
    b"{", b"}", b"{} x", b'{"event_id":"e"} x', b'{"event_id":"e",}', b"{'event_id':'e'}",
    b'{"a":"\\ud800"}', b'{"a":"\xff\xfe"}', b'{"event_id":"\xc3"}', b"\xef\xbb\xbf{}",
    b"\xef\xbb\xbf {}", b" \xef\xbb\xbf{}", b"\xef\xbb\xbf\xef\xbb\xbf{}", b"\xef\xbb{}",
    b'{"a":' + b"[" * 2000 + b"]" * 2000 + b"}",
]  # fmt: skip


def messages(fields: dict[str, str]) -> list[bytes]:
    """The valid message, each field set to each value (or left out), the fields repeated
    (first valid then not, and the other way), an escaped key, keys in another case, and
    space around everything."""

    def encode(pairs: list[tuple[str, str | None]]) -> bytes:
        return ("{" + ",".join(f'"{k}":{v}' for k, v in pairs if v is not None) + "}").encode()

    valid = list(fields.items())
    out = [encode(valid)]
    for key in fields:
        for value in VALUES:
            out.append(encode([(k, value if k == key else v) for k, v in valid]))
        out.append(encode([*valid, (key, '"other"')]))
        out.append(encode([(key, "1"), *valid]))
        out.append(encode([(k.upper() if k == key else k, v) for k, v in valid]))
        escaped = "\\u00" + f"{ord(key[0]):02x}" + key[1:]
        out.append(encode([(escaped if k == key else k, v) for k, v in valid]))
    spaced = " { " + " , ".join(f'"{k}" :\n{v}' for k, v in valid) + " }\t"
    out.append(spaced.encode())
    out.append(b"\xef\xbb\xbf" + encode(valid))
    return out + ODD_MESSAGES


def parse_query(migration: str, prefix: str) -> str:
    """The parse view's query as a migration set it (ALTER ... MODIFY QUERY)."""
    head = f"ALTER TABLE ${{database}}.{prefix}_parsed_mv MODIFY QUERY"
    path = next(SQL_DIR.glob(f"{migration}_*.sql"))
    for statement in split_statements(path.read_text()):
        if statement.startswith(head):
            return statement.removeprefix(head)
    raise AssertionError(f"{path.name} sets no parse view for {prefix}")


def run(client, db: str, query: str, prefix: str, short_circuit: str) -> dict[int, dict]:
    source = (
        f"(SELECT raw_message, '' AS _topic, toInt32(0) AS _partition, toInt64(n) AS _offset,"
        f" CAST(NULL, 'Nullable(DateTime64(3, \\'UTC\\'))') AS _timestamp, 'test' AS _source,"
        f" toUUID('00000000-0000-4000-8000-000000000000') AS _batch_id,"
        f" toDateTime64('{RECEIVED_AT}', 3, 'UTC') AS _received_at FROM {db}.corpus) AS incoming"
    )
    query = query.replace("${database}", db).replace(f"{db}.{prefix}_incoming", source)
    result = client.query(
        f"SELECT * APPLY toString FROM ({query})"
        f" SETTINGS short_circuit_function_evaluation = '{short_circuit}'"
    )
    rows = {}
    for row in result.named_results():
        n = int(row.pop("toString(_offset)"))
        reason = row["toString(reject_reason)"]
        rows[n] = {"reject_reason": reason} if reason else row
    return rows


@pytest.mark.parametrize("prefix", sorted(CONTRACTS))
def test_each_parse_view_says_what_the_one_it_replaced_said(client, config, prefix):
    db = config.database
    lines = messages(CONTRACTS[prefix])
    client.command(f"CREATE TABLE {db}.corpus (n UInt32, raw_message String) ENGINE = Memory")
    client.insert(
        f"{db}.corpus", [list(range(len(lines))), lines], column_names=["n", "raw_message"],
        column_oriented=True,
    )  # fmt: skip
    before = run(client, db, parse_query("0024", prefix), prefix, "disable")
    assert len(before) == len(lines)
    reasons = {row.get("reject_reason", "") for row in before.values()}
    assert len(reasons) > 10, reasons  # the corpus reaches many rules
    assert sum(1 for row in before.values() if "reject_reason" not in row) > 20
    for short_circuit in ("disable", "enable"):
        after = run(client, db, parse_query("0025", prefix), prefix, short_circuit)
        differ = [(lines[n], before[n], after[n]) for n in sorted(before) if before[n] != after[n]]
        assert not differ, f"{len(differ)} messages differ ({short_circuit}), e.g. {differ[:3]}"
