"""What every request handler of one app shares (`toplist()`): configuration, each board's
snapshot cache, the metrics and the embedded consumers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from flask import current_app

from api.metrics import Metrics
from api.snapshots import Answers, SnapshotStore
from toplist.config import Config
from toplist.snapshots import Snapshot

if TYPE_CHECKING:
    from ingest.consumer import KafkaIngest


@dataclass
class Toplist:
    """What the request handlers share: configuration, each board's snapshot cache, the
    metrics, and each board's embedded Kafka consumer when this process runs them."""

    config: Config
    stores: dict[str, SnapshotStore]
    metrics: Metrics = field(default_factory=Metrics)
    consumers: dict[str, KafkaIngest] = field(default_factory=dict)
    answers: Answers = field(default_factory=Answers)  # for api/hot.py

    def on_publication(self, board: str, snapshot: Snapshot | None, error: str | None) -> None:
        """A publication in this process ended (publish/scheduler.py calls it)."""
        self.metrics.record_publication(board, snapshot is not None, error)
        if snapshot is not None:
            self.stores[board].invalidate()

    def close(self) -> None:
        for store in self.stores.values():
            store.close()


def toplist() -> Toplist:
    return current_app.extensions["toplist"]
