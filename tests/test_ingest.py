"""The SQL validation behind the incoming table: what is accepted, what is dead-lettered."""

from __future__ import annotations

import json
from datetime import datetime

from ingest.generator import MALFORMED_LINES
from ingest.load import load_lines


def rows(client, sql: str, **parameters):
    return client.query(sql, parameters=parameters).result_rows


def test_every_malformed_line_lands_in_dead_letters_with_its_bytes_and_reason(client, config):
    invalid_utf8 = b'{"event_id": "\xff\xfe", "song_id": "s"}'
    lines = [line.encode() for line in MALFORMED_LINES] + [invalid_utf8]
    result = load_lines(client, config.database, lines)
    assert (result.accepted, result.rejected) == (0, len(lines)), "a bad line was counted"
    stored = rows(client, f"SELECT hex(raw_message) FROM {config.database}.listens_dead_letters")
    assert sorted(bytes.fromhex(raw) for (raw,) in stored) == sorted(lines), (
        "dead letters must keep the exact bytes that were sent"
    )
    dead = rows(
        client,
        f"SELECT raw_message, reason FROM {config.database}.listens_dead_letters"
        " WHERE isValidUTF8(raw_message)",
    )
    reasons = dict(dead)
    assert reasons["this is not json"] == "not a JSON object"
    by_id = {
        json.loads(raw)["event_id"]: reason
        for raw, reason in dead
        if raw.startswith("{") and raw.endswith("}") and '"event_id": "' in raw
    }
    assert by_id["bad-country"].startswith("country:")
    assert by_id["no-offset"].startswith("event_time: not an RFC 3339")
    assert by_id["bad-hour"].startswith("event_time: not an RFC 3339")
    assert by_id["float-time"].startswith("event_time: missing, or neither")
    assert by_id["epoch-seconds"].startswith("event_time: 1764600000 looks like epoch seconds")
    assert by_id["leap-second"].startswith("event_time: a leap second")
    assert by_id["no-song"].startswith("song_id:")
    assert by_id["no-user"].startswith("user_id:")
    assert by_id["x" * 129] == "event_id: must be 1 to 128 bytes"


def test_accepted_forms_of_event_time_and_limits(client, config):
    base = {"song_id": "s", "user_id": "u", "country": "SE"}
    events = [
        {**base, "event_id": "zulu", "event_time": "2026-12-01T10:00:00Z"},
        {**base, "event_id": "offset", "event_time": "2026-12-01T11:00:00.250+01:00"},
        {**base, "event_id": "millis", "event_time": 1796119200000},
        {**base, "event_id": "e" * 128, "song_id": "s" * 256, "event_time": 1796119200000},
        {**base, "event_id": "extra-fields", "event_time": 1796119200000, "device": "tv"},
    ]
    result = load_lines(client, config.database, [json.dumps(event) for event in events])
    assert result.accepted == len(events), "valid events were rejected"
    times = dict(rows(client, f"SELECT event_id, event_time FROM {config.database}.listens"))
    moment = datetime(2026, 12, 1, 10, 0)
    assert times["zulu"] == moment
    assert times["offset"] == datetime(2026, 12, 1, 10, 0, 0, 250000), "offset not applied"
    assert times["millis"] == moment


def test_raw_table_keeps_every_accepted_event_once(client, config):
    event = {
        "event_id": "a",
        "song_id": "s",
        "user_id": "u",
        "country": "DE",
        "event_time": "2026-12-01T10:00:00Z",
    }
    first = load_lines(client, config.database, [json.dumps(event)])
    again = load_lines(client, config.database, [json.dumps(event)] * 3)
    assert (first.accepted, again.accepted, again.duplicates) == (1, 0, 3)
    assert rows(client, f"SELECT event_id, _source FROM {config.database}.listens") == [
        ("a", "load")
    ]
    total = rows(client, f"SELECT sumMerge(listens) FROM {config.database}.listens_by_10m")
    assert total == [(1,)], "a redelivered event reached the aggregates again"
