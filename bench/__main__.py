"""Toplist's benchmarks: ingest, publication and the read path, each beside its baseline.

Usage: python -m bench [--only ingest,publication,read,freshness] [--size small|full] [--runs R]

Every figure is the median of --runs runs, measured beside its baseline in the same run on
the same machine (a 2-core machine is noisy, so only the ratios travel). Prints one table a
section and writes them all to --json (a section run alone replaces only its own part).
Needs wrk and nginx for the read path (`make bench` installs them from Debian).

  full   ingest 2M events from 4 partitions; publication at 1M, 10M and 50M events, the
         songs and hot-song sweeps at 10M; the read path at 100, 1000, 10000 and max req/s;
         freshness for 60 s at 1,000 events/s
  small  a quick look: 200k events; publication at 200k and 1M, sweeps at 200k; freshness
         for 20 s
"""

from __future__ import annotations

import json
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

from bench import freshness, ingest, publication, read_path
from bench.common import arguments, with_broker

SIZES = {
    "full": {
        "events": 2_000_000,
        "sizes": [1_000_000, 10_000_000, 50_000_000],
        "sweep_at": 10_000_000,
        "freshness_seconds": 60,
    },
    "small": {
        "events": 200_000,
        "sizes": [200_000, 1_000_000],
        "sweep_at": 200_000,
        "freshness_seconds": 20,
    },
}
SECTIONS = ("ingest", "publication", "read", "freshness")


def main(argv: list[str] | None = None) -> int:
    parser = arguments("python -m bench", __doc__)
    parser.add_argument(
        "--only",
        default=",".join(SECTIONS),
        help=f"sections to run, comma-separated ({', '.join(SECTIONS)})",
    )
    parser.add_argument("--size", choices=SIZES, default="full")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--brokers", help="an existing Kafka broker (default: start one)")
    parser.add_argument("--json", type=Path, default=Path("bench/results.json"))
    args = parser.parse_args(argv)
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    size = SIZES[args.size]
    report = json.loads(args.json.read_text()) if args.json.exists() else {}
    machine = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    tables = []
    if "ingest" in sections:
        with with_broker(args.brokers) as brokers:
            part = ingest.run(size["events"], 4, args.runs, brokers)
        tables.append(ingest.render(part))
        report["ingest"] = part
    if "publication" in sections:
        part = publication.run(size["sizes"], size["sweep_at"], args.runs)
        tables.append(publication.render(part))
        report["publication"] = part
    if "read" in sections:
        part = read_path.run(args.runs)
        tables.append(read_path.render(part))
        report["read"] = part
    if "freshness" in sections:
        with with_broker(args.brokers) as brokers:
            part = freshness.run(size["freshness_seconds"], 1000, 30, brokers)
        tables.append(freshness.render(part))
        report["freshness"] = part
    for name in sections:
        report[name].update(
            machine=machine, measured_at=datetime.now(UTC).isoformat(), size=args.size
        )
    args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print("\n\n".join(tables))
    print(f"\n(cores: {machine['cores']}; written to {args.json})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
