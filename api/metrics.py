"""Prometheus text exposition, without a client library: a few counters and a histogram.

Process-local figures (requests, publication outcomes) live here; figures about the data
(ingest counts, dead letters, snapshot age) are read from ClickHouse at scrape time, so every
API process in server mode reports the same ones.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


def _labels(pairs: dict[str, str]) -> str:
    if not pairs:
        return ""
    inner = ",".join(
        f'{key}="{value.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for key, value in sorted(pairs.items())
    )
    return "{" + inner + "}"


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str], int] = defaultdict(int)
        self._latency_counts: dict[str, list[int]] = {}
        self._latency_sum: dict[str, float] = defaultdict(float)
        self.publications: dict[tuple[str, str], int] = defaultdict(int)
        self.last_publish_error: dict[str, str] = {}  # by board, until it publishes again

    def observe_request(self, endpoint: str, status: int, seconds: float) -> None:
        with self._lock:
            self._requests[(endpoint, str(status))] += 1
            counts = self._latency_counts.setdefault(endpoint, [0] * (len(LATENCY_BUCKETS) + 1))
            counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
            self._latency_sum[endpoint] += seconds

    def record_publication(self, board: str, ok: bool, error: str | None = None) -> None:
        with self._lock:
            self.publications[(board, "success" if ok else "failure")] += 1
            if ok:
                self.last_publish_error.pop(board, None)
            else:
                self.last_publish_error[board] = error or "failed"

    def render(self, gauges: list[tuple[str, str, str, dict[str, str], float]]) -> str:
        """Render process metrics plus `gauges` as (name, type, help, labels, value)."""
        lines: list[str] = []
        described: set[str] = set()

        def sample(name: str, kind: str, help_text: str, labels: dict[str, str], value: float):
            if name not in described:
                lines.append(f"# HELP {name} {help_text}")
                lines.append(f"# TYPE {name} {kind}")
                described.add(name)
            lines.append(f"{name}{_labels(labels)} {value:g}")

        # A metric's samples together, as the text format requires (the sort is stable, so
        # each metric keeps its samples' order).
        for name, kind, help_text, labels, value in sorted(gauges, key=lambda gauge: gauge[0]):
            sample(name, kind, help_text, labels, value)
        with self._lock:
            for (board, outcome), count in sorted(self.publications.items()):
                sample(
                    "toplist_publications_total",
                    "counter",
                    "Snapshot publications attempted by this process, by board and outcome.",
                    {"board": board, "outcome": outcome},
                    count,
                )
            for (endpoint, status), count in sorted(self._requests.items()):
                sample(
                    "toplist_http_requests_total",
                    "counter",
                    "HTTP requests served, by endpoint and status.",
                    {"endpoint": endpoint, "status": status},
                    count,
                )
            name = "toplist_http_request_duration_seconds"
            if self._latency_counts:
                lines.append(f"# HELP {name} HTTP request latency, by endpoint.")
                lines.append(f"# TYPE {name} histogram")
            for endpoint, counts in sorted(self._latency_counts.items()):
                cumulative = 0
                for bound, count in zip((*LATENCY_BUCKETS, float("inf")), counts, strict=True):
                    cumulative += count
                    le = "+Inf" if bound == float("inf") else f"{bound:g}"
                    lines.append(
                        f"{name}_bucket{_labels({'endpoint': endpoint, 'le': le})} {cumulative}"
                    )
                lines.append(
                    f"{name}_sum{_labels({'endpoint': endpoint})} {self._latency_sum[endpoint]:g}"
                )
                lines.append(f"{name}_count{_labels({'endpoint': endpoint})} {cumulative}")
        return "\n".join(lines) + "\n"
