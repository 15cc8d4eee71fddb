"""Freshness: from an event's produce time to the first served answer that counts it.

Usage: python -m bench.freshness [--seconds S] [--rate R] [--charts-every S] [--brokers B]

`toplist serve --ingest --publish-every S` runs as users run it (embedded: every board's
consumer, the scheduler and the API in one process), each board on its shipped refresh
setting. A producer sends --rate events/s through the development broker, spread over the four
boards and dated now; twice a second it adds, per board, a marker: an event that only one
answer can show, and shows as soon as a snapshot counts it:

* flash sale: 1,000 units of a new product; `GET /v1/sale/products/<product>` answers 200;
* live listeners: a new user STARTs a new song; the song is on `/v1/listeners?k=1000`;
* shelves: an order of a catalog item in a restaurant of its own; the item is on
  `/v1/topk?scope=restaurant:<r>&metric=orders&window=1h`;
* charts: a listen of a new song, dated 15 minutes before the current 10-minute bucket (the
  current snapshot's windows take it); `/v1/charts/<country>/songs/<song>?window=1h` is 200.

Every 50 ms a poller asks for each board's oldest marker not yet shown, and on through the
later ones while they show: a board's markers are sent in order on one partition, so none
normally shows before the ones sent earlier (asking for every waiting marker, the harness
itself sent four times as many requests, ~330 a second, on the same two cores as the server).
It also asks for the newest waiting marker, and for all of them when that one shows first.
Prints p50 / p99 / max of event-to-answer latency per board beside the design's targets (sale
2 s, listeners 5 s, shelves 30 s, charts one publication interval).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests

from bench.common import (
    arguments,
    bench_config,
    create_topics,
    say,
    scratch,
    table,
    wait_for_url,
    with_broker,
)
from ingest.kafka_broker import free_port
from ingest.produce import producer
from toplist.config import Config

TARGETS = {"sale": 2.0, "listeners": 5.0, "popular": 30.0}  # p99 seconds; charts: interval
SHARES = {"charts": 0.4, "sale": 0.2, "listeners": 0.2, "popular": 0.2}
BOARDS = ("charts", "sale", "listeners", "popular")
MARKERS_PER_SECOND = 2


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def background(board: str, rng: random.Random) -> dict:
    """One ordinary event of `board`, dated now."""
    when, n = _now(), uuid.uuid4().hex
    if board == "charts":
        return {"event_id": n, "song_id": f"song-{rng.randrange(1000)}", "user_id": f"u{n[:6]}",
                "country": rng.choice(["SE", "DE", "NO"]), "event_time": when}  # fmt: skip
    if board == "sale":
        units = rng.randint(1, 3)
        return {"event_id": n, "order_id": n, "product_id": f"p-{rng.randrange(200)}",
                "buyer_id": f"b-{rng.randrange(5000)}", "units": units,
                "amount_cents": 999 * units, "event_time": when}  # fmt: skip
    if board == "listeners":
        song = f"song-{rng.randrange(200)}"  # markers (1 listener) stay within the kept 1000
        return {"user_id": f"u-{rng.randrange(5000)}", "playback_id": n, "type": "START",
                "version": 1, "song_id": song, "event_time": when}  # fmt: skip
    return {"event_id": n, "item_id": f"item-{rng.randrange(100)}",
            "restaurant_id": f"r-{rng.randrange(20)}", "city_id": f"c-{rng.randrange(5)}",
            "type": rng.choice(["view", "view", "view", "order"]), "user_id": f"u{n[:6]}",
            "event_time": when}  # fmt: skip


def marker(board: str, n: int) -> tuple[dict, str]:
    """The marker event number n of `board`, and the path whose answer shows it."""
    when, tag = _now(), f"fresh-{n}"
    if board == "charts":
        bucket = datetime.now(UTC).replace(second=0, microsecond=0)
        bucket -= timedelta(minutes=bucket.minute % 10 + 15)
        event = {"event_id": f"m-{tag}", "song_id": tag, "user_id": "marker", "country": "FI",
                 "event_time": bucket.isoformat().replace("+00:00", "Z")}  # fmt: skip
        return event, f"/v1/charts/FI/songs/{tag}?window=1h"
    if board == "sale":
        event = {"event_id": f"m-{tag}", "order_id": tag, "product_id": tag, "buyer_id": "marker",
                 "units": 1000, "amount_cents": 1, "event_time": when}  # fmt: skip
        return event, f"/v1/sale/products/{tag}"
    if board == "listeners":
        event = {"user_id": f"marker-{tag}", "playback_id": tag, "type": "START", "version": 1,
                 "song_id": tag, "event_time": when}  # fmt: skip
        return event, "/v1/listeners?k=1000"
    event = {"event_id": f"m-{tag}", "item_id": tag, "restaurant_id": f"marker-{tag}",
             "city_id": "marker", "type": "order", "user_id": "m", "event_time": when}  # fmt: skip
    scope = urllib.parse.quote(f"restaurant:marker-{tag}")
    return event, f"/v1/topk?scope={scope}&metric=orders&window=1h&k=1"


def shows(board: str, tag: str, response: requests.Response) -> bool:
    if response.status_code != 200:
        return False
    if board in ("charts", "sale"):
        return True
    items = response.json()["items"]
    key = "song_id" if board == "listeners" else "item_id"
    return any(item[key] == tag for item in items)


def run(seconds: float, rate: int, charts_every: float, brokers: str | None) -> dict:
    work = scratch("freshness")
    run_id = uuid.uuid4().hex[:8]  # topics of this run's own, on a broker used before too
    topics = {board: f"fresh-{board}-{run_id}" for board in BOARDS}
    markers = int(seconds * MARKERS_PER_SECOND) + 10
    env = {
        **os.environ,
        "TOPLIST_CLICKHOUSE_URL": f"chdb://{work / 'data'}",
        "TOPLIST_KAFKA_TOPIC": topics["charts"],
        "TOPLIST_KAFKA_TOPIC_SALE": topics["sale"],
        "TOPLIST_KAFKA_TOPIC_LISTENERS": topics["listeners"],
        "TOPLIST_KAFKA_TOPIC_POPULAR": topics["popular"],
    }
    catalog = work / "catalog.jsonl"
    catalog.write_text(
        "".join(
            json.dumps(
                {
                    "item_id": name,
                    "name": name,
                    "price_cents": 100,
                    "available": True,
                    "deleted": False,
                }
            )
            + "\n"  # fmt: skip
            for name in [f"fresh-{n}" for n in range(markers)] + [f"item-{n}" for n in range(100)]
        )
    )
    cli = [sys.executable, "-m", "toplist.cli"]
    subprocess.run([*cli, "catalog", str(catalog)], env=env, check=True, capture_output=True)
    with with_broker(brokers) as bootstrap:
        create_topics(bootstrap, list(topics.values()), partitions=1)
        port = free_port()
        env["TOPLIST_KAFKA_BROKERS"] = bootstrap
        command = [*cli, "serve", "--ingest", "--publish-every", str(charts_every),
                   "--port", str(port)]  # fmt: skip
        log = (work / "serve.log").open("w")  # kept with TOPLIST_BENCH_KEEP=1
        server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_for_url(base + "/healthz", 120)
            latencies = _measure(bootstrap, topics, base, seconds, rate)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(60)
            log.close()
    stored = stored_at(work / "data", Config.from_env(env).database)  # the server's
    summary = {}
    for board, markers_sent in latencies.items():
        values = [m["latency"] for m in markers_sent]
        seen = sorted(v for v in values if v is not None)
        p50, p99 = _quantiles(seen)
        # Where the time went: produce to stored (Kafka, the consumer's batch and the write
        # before it), stored to published (applying the batch, waiting for a publication to
        # begin, publishing), published to seen (the API and the poller's 50 ms).
        to_stored = [stored[board][m["tag"]] - m["sent"] for m in markers_sent
                     if m["tag"] in stored[board]]  # fmt: skip
        to_published = [m["published"] - stored[board][m["tag"]] for m in markers_sent
                        if m["published"] and m["tag"] in stored[board]]  # fmt: skip
        to_seen = [m["latency"] - (m["published"] - m["sent"]) for m in markers_sent
                   if m["latency"] is not None and m["published"]]  # fmt: skip
        summary[board] = {
            "markers": len(values),
            "seen": len(seen),
            "p50_s": p50,
            "p99_s": p99,
            "max_s": seen[-1] if seen else None,
            "target_p99_s": TARGETS.get(board, charts_every),
            "stages_p50_p99_s": {
                "produce_to_stored": _quantiles(to_stored),
                "stored_to_published": _quantiles(to_published),
                "published_to_seen": _quantiles(to_seen),
            },
            "latencies_s": values,  # in the order the markers were sent
        }
    return {
        "seconds": seconds,
        "rate": rate,
        "charts_every": charts_every,
        "refresh": "shipped defaults (TOPLIST_*_REFRESH_SECONDS, TOPLIST_KAFKA_BATCH_SECONDS)",
        "summary": summary,
    }


def _measure(
    bootstrap: str, topics: dict[str, str], base: str, seconds: float, rate: int
) -> dict[str, list]:
    """Send for `seconds`, polling each marker until it shows (or 90 s after the end)."""
    kafka = producer(bootstrap)
    rng = random.Random(7)
    # [sent, tag, path, latency, sent (wall clock), published_at of the answer that showed it]
    pending: dict[str, list] = {board: [] for board in BOARDS}
    lock, stop = threading.Lock(), threading.Event()

    def poll(board: str) -> None:
        session = requests.Session()
        while True:
            with lock:
                waiting = [m for m in pending[board] if m[3] is None]
            if not waiting and stop.is_set():
                return
            # The oldest first, and on while they show. Then the newest: it shows before an
            # earlier one only if the order broke (a board that cut an earlier marker, a run
            # long enough to fill a kept depth), and then every other waiting one is asked.
            shown = 0
            while shown < len(waiting) and seen(session, board, waiting[shown]):
                shown += 1
            rest = waiting[shown + 1 :]
            if rest and seen(session, board, rest[-1]):
                for entry in rest[:-1]:
                    seen(session, board, entry)
            if stop.is_set() and time.monotonic() > deadline + 90:
                return
            time.sleep(0.05)

    def seen(session: requests.Session, board: str, entry: list) -> bool:
        """Ask for a marker; when an answer shows it, record when and which publication."""
        try:
            response = session.get(base + entry[2], timeout=5)
        except requests.RequestException:
            return False
        if not shows(board, entry[1], response):
            return False
        entry[3] = time.monotonic() - entry[0]
        entry[5] = _wall(response.json().get("published_at"))
        return True

    def send_markers(number: int) -> None:
        for board in BOARDS:
            event, path = marker(board, number)
            sent, sent_wall = time.monotonic(), time.time()
            kafka.send(topics[board], value=json.dumps(event).encode())
            with lock:
                pending[board].append([sent, f"fresh-{number}", path, None, sent_wall, None])

    # Warm up: the first marker of each board is waited for and left out (the first
    # publications of a process load dbt's plans and open the consumers).
    deadline = time.monotonic() + 1e9
    pollers = [threading.Thread(target=poll, args=(b,), daemon=True) for b in BOARDS]
    for thread in pollers:
        thread.start()
    send_markers(0)
    kafka.flush(10)
    warm_until = time.monotonic() + 180
    while any(entry[3] is None for entries in pending.values() for entry in entries):
        if time.monotonic() > warm_until:
            raise SystemExit("freshness: the warm-up markers did not show within 180 s")
        time.sleep(0.2)
    say("freshness: warmed up; measuring")
    with lock:
        for entries in pending.values():
            entries.clear()
    deadline = time.monotonic() + seconds
    number, tick, next_marker = 1, time.monotonic(), time.monotonic()
    while time.monotonic() < deadline:
        for board, share in SHARES.items():
            for _ in range(max(1, round(rate * share / 100))):
                event = background(board, rng)
                kafka.send(topics[board], value=json.dumps(event).encode())
        if time.monotonic() >= next_marker:
            send_markers(number)
            number += 1
            next_marker += 1 / MARKERS_PER_SECOND
        tick += 0.01
        time.sleep(max(0.0, tick - time.monotonic()))
    kafka.flush(30)
    kafka.close()
    stop.set()
    for thread in pollers:
        thread.join(120)
    say(f"freshness: sent {number - 1} markers per board")
    return {
        board: [{"tag": e[1], "latency": e[3], "sent": e[4], "published": e[5]} for e in entries]
        for board, entries in pending.items()
    }


def _wall(iso_time: str | None) -> float | None:
    if not iso_time:
        return None
    return datetime.fromisoformat(iso_time.replace("Z", "+00:00")).timestamp()


def stored_at(data: Path, database: str) -> dict[str, dict[str, float]]:
    """Per board, when each marker was stored in the engine (its batch's `_received_at` in the
    board's incoming log: taken from Kafka and handed to the engine), by tag. Read from the
    data directory once the server has stopped (one process owns an embedded engine)."""
    from toplist.boards import BOARDS as WAYS_IN
    from toplist.engine import connect

    client = connect(bench_config(data, database=database))
    try:
        return {
            board: dict(
                client.query(
                    f"""
                    SELECT extract(raw_message, '"(fresh-[0-9]+)"') AS tag,
                        toUnixTimestamp64Milli(min(_received_at)) / 1000
                    FROM {database}.{WAYS_IN[board].log}
                    WHERE tag != '' GROUP BY tag
                    """
                ).result_rows
            )
            for board in BOARDS
        }
    finally:
        client.close()


def _quantiles(values: list[float]) -> tuple[float | None, float | None]:
    values = sorted(values)
    if not values:
        return None, None
    return values[len(values) // 2], values[min(len(values) - 1, int(len(values) * 0.99))]


def render(report: dict) -> str:
    def stage(r: dict, name: str) -> str:
        p50, p99 = r["stages_p50_p99_s"][name]
        return "-" if p50 is None else f"{p50:.2f} / {p99:.2f}"

    rows = [
        [
            board,
            r["markers"],
            r["seen"],
            r["p50_s"],
            r["p99_s"],
            r["max_s"],
            r["target_p99_s"],
            stage(r, "produce_to_stored"),
            stage(r, "stored_to_published"),
            stage(r, "published_to_seen"),
        ]
        for board, r in report["summary"].items()
    ]
    return table(
        f"Freshness: produce to first answer that counts it, {report['rate']:,} events/s for"
        f" {report['seconds']:g} s, charts published every {report['charts_every']:g} s",
        [
            "board",
            "markers",
            "seen",
            "p50 s",
            "p99 s",
            "max s",
            "target p99 s",
            "to stored p50/p99",
            "stored to published",
            "published to seen",
        ],
        rows,
    )


def main(argv: list[str] | None = None) -> int:
    parser = arguments("python -m bench.freshness", __doc__)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rate", type=int, default=1000, help="events/s over the four boards")
    parser.add_argument("--charts-every", type=float, default=30)
    parser.add_argument("--brokers", help="an existing Kafka broker (default: start one)")
    parser.add_argument("--json", type=Path, help="write the report here too")
    args = parser.parse_args(argv)
    report = run(args.seconds, args.rate, args.charts_every, args.brokers)
    print(render(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
