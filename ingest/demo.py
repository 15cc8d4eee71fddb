"""The demo traffic of `toplist run`: a history to start from, then a stream of events for
every board, through Kafka when brokers are configured and through `load_lines` otherwise,
so the demo meets exactly the path real events take."""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime, timedelta

from clickhouse_connect.driver.client import Client

from ingest.board_events import ItemEventGenerator, OrderGenerator, demo_board_streams
from ingest.catalog import load_catalog
from ingest.generator import ListenGenerator, demo_stream
from ingest.load import load_lines, repair_configured
from ingest.produce import event_key, producer
from toplist.boards import BOARDS, CHARTS
from toplist.config import Config

log = logging.getLogger(__name__)


def load_history(client: Client, config: Config, listens: int, say=print) -> None:
    """Listens over the last 40 days, the marketplace catalog (with unavailable, deleted and
    featured items), a busy last day of item events after four quieter weeks (so the shelves'
    7d and 28d windows differ, and quiet restaurants' shelves widen), and an hour of
    flash-sale orders."""
    now = datetime.now(UTC)
    seed = int(now.timestamp())
    history = ListenGenerator(seed=seed).batch(listens, now - timedelta(days=40), now, malformed=10)
    say(f"loading {len(history.lines):,} demo lines spread over the last 40 days ...")
    result = load_lines(client, config.database, history.lines)
    say(
        f"  accepted {result.accepted:,} · duplicates {result.duplicates:,}"
        f" · rejected {result.rejected:,}"
    )
    items = ItemEventGenerator(seed=seed)
    catalog = load_catalog(client, config.database, [json.dumps(row) for row in items.catalog()])
    events = items.events(5_000, now - timedelta(days=1), now, malformed=3)
    events.lines += items.events(3_000, now - timedelta(days=29), now - timedelta(days=1)).lines
    orders = OrderGenerator(seed=seed).orders(3_000, now - timedelta(hours=1), now, malformed=2)
    load_lines(client, config.database, events.lines, source="demo", board=BOARDS["popular"])
    load_lines(client, config.database, orders.lines, source="demo", board=BOARDS["sale"])
    say(
        f"loaded {catalog.loaded} catalog items, {len(events.lines):,} item events and"
        f" {len(orders.lines):,} flash-sale orders for the other boards"
    )


class DemoStream:
    """About `rate` listens a second, and every other board's demo events, on a thread."""

    def __init__(self, client: Client, config: Config, rate: int) -> None:
        self.client, self.config, self.rate = client, config, rate
        self.kafka = producer(config.kafka_brokers) if config.kafka_brokers else None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-stream", daemon=True)

    def start(self) -> DemoStream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self.kafka:
            self.kafka.close(timeout=10)

    def _send(self, lines: list[str], board: str) -> None:
        if self.kafka:
            for line in lines:
                value = line.encode()
                key = event_key(value, BOARDS[board].key)
                self.kafka.send(self.config.topic(board), value, key=key)
        else:
            load_lines(self.client, self.config.database, lines, source="demo", board=BOARDS[board])

    def _run(self) -> None:
        seed = int(datetime.now(UTC).timestamp())
        cut_off = False  # a failed write may leave its batch unfinished
        boards = demo_board_streams(seed=seed + 2)
        for lines in demo_stream(seed=seed + 1, per_second=self.rate):
            if self._stop.is_set():
                break
            try:
                if cut_off:
                    for board in BOARDS.values():
                        repair_configured(self.client, self.config, board)
                    cut_off = False
                self._send(lines, CHARTS.name)
                for board, board_lines in next(boards).items():
                    self._send(board_lines, board)
            except Exception:
                log.exception("demo ingest batch failed")
                cut_off = not self.kafka  # through Kafka, the consumer repairs
            self._stop.wait(1.0)
