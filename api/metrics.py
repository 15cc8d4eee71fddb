"""`/metrics` through prometheus_client, the standard Python client.

Process-local figures (requests and their latency, publication outcomes) are the client's
counters and histogram; figures about the data (ingest counts, dead letters, snapshot age)
are read from ClickHouse at scrape time and handed to `render` as gauges, so every API process
reports the same ones. With several worker processes, set PROMETHEUS_MULTIPROC_DIR to a
directory they share (emptied before they start): each worker's counters go to files there,
and a scrape of any worker sums them all (the client's multiprocess mode).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Gauge = tuple[str, str, str, dict[str, str], float]  # name, type, help, labels, value

disable_created_metrics()  # no *_created series beside each counter


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.registry = CollectorRegistry()
        self._requests = Counter(
            "toplist_http_requests",
            "HTTP requests served, by endpoint and status.",
            ["endpoint", "status"],
            registry=self.registry,
        )
        self._latency = Histogram(
            "toplist_http_request_duration_seconds",
            "HTTP request latency, by endpoint.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._publications = Counter(
            "toplist_publications",
            "Snapshot publications attempted by this process, by board and outcome.",
            ["board", "outcome"],
            registry=self.registry,
        )
        self.last_publish_error: dict[str, str] = {}  # by board, until it publishes again

    def observe_request(self, endpoint: str, status: int, seconds: float) -> None:
        self._requests.labels(endpoint, str(status)).inc()
        self._latency.labels(endpoint).observe(seconds)

    def record_publication(self, board: str, ok: bool, error: str | None = None) -> None:
        self._publications.labels(board, "success" if ok else "failure").inc()
        with self._lock:
            if ok:
                self.last_publish_error.pop(board, None)
            else:
                self.last_publish_error[board] = error or "failed"

    def publications(self, board: str, outcome: str) -> int:
        """Publications of `board` this process attempted with `outcome` (success, failure)."""
        labels = {"board": board, "outcome": outcome}
        return int(self.registry.get_sample_value("toplist_publications_total", labels) or 0)

    def render(self, gauges: list[Gauge]) -> str:
        """This process's metrics (every worker's, in multiprocess mode), then `gauges`."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            process = CollectorRegistry()
            MultiProcessCollector(process)
        else:
            process = self.registry
        data = CollectorRegistry()
        data.register(_Gauges(gauges))
        return generate_latest(data).decode() + generate_latest(process).decode()


class _Gauges:
    """Figures read from the engine for one scrape, as metric families."""

    def __init__(self, gauges: list[Gauge]) -> None:
        self.gauges = gauges

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for name, kind, help_text, labels, value in self.gauges:
            family = families.get(name)
            if family is None:
                keys = sorted(labels)
                if kind == "counter":
                    family = CounterMetricFamily(name, help_text, labels=keys)
                else:
                    family = GaugeMetricFamily(name, help_text, labels=keys)
                families[name] = family
            family.add_metric([labels[key] for key in sorted(labels)], value)
        yield from families.values()
