"""Read path: charts, rank lookups and shelves from `toplist serve`, beside nginx serving the
same JSON from a file.

Usage: python -m bench.read_path [--runs R] [--duration S]

A fresh engine gets 1M generated listens and a flash of marketplace item events with their
catalog, and one published snapshot of each board (in a child process, since one process owns
a chDB data directory). Then, in each run, `toplist serve` is measured as users run it both
ways, one after the other on the same data: `--workers 0` (the one process that holds the
engine serves every read, waitress with 4 request threads: the baseline) and the default
(the core count of granian worker processes reading the snapshot files, api/workers.py); and
nginx (2 workers, access log off) serves each answer's bytes from a file. wrk (2 threads)
drives each at about 100, 1,000 and 10,000 req/s (a fixed per-request delay on a fixed number
of connections, wrk's own rate control) and at the most it can (64 connections). wrk, the
server and nginx share the machine's cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.common import arguments, bench_config, median, say, scratch, table, wait_for_url
from ingest.kafka_broker import free_port

# target -> (connections, delay in ms between a connection's requests; None = flat out)
LOADS = {"100/s": (10, 100), "1000/s": (50, 50), "10000/s": (120, 10), "max": (64, None)}
SCOPE = "SE"
SHELF = "/v1/topk?scope=city:sf&metric=views&window=1d&k=10"
# name -> `toplist serve` arguments
SERVERS = {"one process": ["--workers", "0"], "workers": []}


def setup(directory: Path) -> None:
    """Child process: 1M events and one published snapshot in `directory`."""
    from bench.publication import generate
    from ingest.board_events import ItemEventGenerator
    from ingest.catalog import load_catalog
    from ingest.load import load_lines
    from publish.publisher import publish
    from toplist.boards import BOARDS
    from toplist.engine import connect
    from toplist.migrate import migrate

    config = bench_config(directory)
    client = connect(config)
    migrate(client, config)
    now = datetime.now(UTC)
    generate(client, config.database, 0, 1_000_000, now, 10_000, False)
    items = ItemEventGenerator(seed=1, restaurants=500, items_each=20, users=10_000)
    load_catalog(client, config.database, [json.dumps(row) for row in items.catalog()])
    events = items.events(200_000, now - timedelta(hours=20), now)
    load_lines(client, config.database, events.lines, board=BOARDS["popular"])
    publish(client, config)
    publish(client, config, board="popular")
    client.close()


def _nginx(root: Path, port: int) -> subprocess.Popen:
    conf = root / "nginx.conf"
    conf.write_text(
        f"""
worker_processes 2;
pid {root}/nginx.pid;
error_log {root}/error.log;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {root}/tmp;
    server {{
        listen 127.0.0.1:{port};
        location / {{ root {root}/www; default_type application/json; }}
    }}
}}
"""
    )
    (root / "tmp").mkdir(exist_ok=True)
    return subprocess.Popen(
        [
            "nginx",
            "-p",
            str(root),
            "-c",
            str(conf),
            "-g",
            "daemon off;" + (" user root;" if os.geteuid() == 0 else ""),
        ]
    )


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def _ms(text: str | None) -> float:
    if text is None:  # no request was answered
        return math.nan
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()
    return float(number) * _UNITS[unit]


def wrk(url: str, connections: int, delay_ms: int | None, seconds: int, script: Path) -> dict:
    command = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", url]
    if delay_ms is not None:
        script.write_text(f"function delay() return {delay_ms} end\n")
        command[1:1] = ["-s", str(script)]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    latency = dict(re.findall(r"^\s+(50|99)%\s+(\S+)$", out, re.M))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "requests_per_second": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "p50_ms": _ms(latency.get("50")),
        "p99_ms": _ms(latency.get("99")),
        "non_2xx": int(errors.group(1)) if errors else 0,
    }


def _serve(env: dict, port: int, arguments: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "toplist.cli", "serve", "--port", str(port), *arguments],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _stop(process: subprocess.Popen | None) -> None:
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def run(runs: int, seconds: int = 10) -> dict:
    if not (shutil.which("wrk") and shutil.which("nginx")):
        raise SystemExit("the read path needs wrk and nginx: `make bench` installs them")
    work = scratch("read")
    say("read path: 1M listens, 200k item events and their snapshots ...")
    subprocess.run(
        [sys.executable, "-m", "bench.read_path", "--setup", str(work / "data")], check=True
    )
    api_port, nginx_port = free_port(), free_port()
    api = f"http://127.0.0.1:{api_port}"
    env = {
        **os.environ,
        "TOPLIST_CLICKHOUSE_URL": f"chdb://{work / 'data'}",
        "TOPLIST_POLICIES": "v1",
    }
    (work / "www").mkdir()
    paths: dict[str, str] = {}  # endpoint -> path and query
    bodies: dict[str, bytes] = {}
    server = _serve(env, api_port, SERVERS["workers"])
    try:
        chart = wait_for_url(f"{api}/v1/charts/{SCOPE}")
        song = json.loads(chart)["items"][4]["song_id"]
        paths = {
            "chart": f"/v1/charts/{SCOPE}",
            "rank": f"/v1/charts/{SCOPE}/songs/{song}",
            "shelf": SHELF,
        }
        for endpoint, path in paths.items():
            bodies[endpoint] = wait_for_url(api + path)
            (work / "www" / f"{endpoint}.json").write_bytes(bodies[endpoint])
    finally:
        _stop(server)
    nginx = _nginx(work, nginx_port)
    samples: dict[str, dict[str, dict[str, list[dict]]]] = {
        endpoint: {load: {name: [] for name in [*SERVERS, "nginx"]} for load in LOADS}
        for endpoint in paths
    }

    def measure(n: int, name: str, url_of: dict[str, str]) -> None:
        for endpoint, url in url_of.items():
            for load, (connections, delay) in LOADS.items():
                result = wrk(url, connections, delay, seconds, work / "delay.lua")
                samples[endpoint][load][name].append(result)
                say(
                    f"read run {n + 1}/{runs}: {name:<11} {endpoint:<5} {load:>7}"
                    f"  {result['requests_per_second']:>9,.0f} req/s"
                    f"  p50 {result['p50_ms']:.2f} ms  p99 {result['p99_ms']:.2f} ms"
                )

    try:
        wait_for_url(f"http://127.0.0.1:{nginx_port}/chart.json")
        for n in range(runs):
            for name, arguments in SERVERS.items():
                server = _serve(env, api_port, arguments)
                try:
                    for path in paths.values():
                        wait_for_url(api + path)
                    measure(n, name, {endpoint: api + path for endpoint, path in paths.items()})
                finally:
                    _stop(server)
            measure(
                n,
                "nginx",
                {endpoint: f"http://127.0.0.1:{nginx_port}/{endpoint}.json" for endpoint in paths},
            )
    finally:
        _stop(nginx)
    summary = {
        endpoint: {
            load: {
                name: {key: median([s[key] for s in values]) for key in values[0]}
                for name, values in by_server.items()
            }
            for load, by_server in by_load.items()
        }
        for endpoint, by_load in samples.items()
    }
    return {
        "paths": paths,
        "body_bytes": {endpoint: len(body) for endpoint, body in bodies.items()},
        "servers": {
            "one process": "toplist serve --workers 0 (embedded: the engine's process serves"
            " every read, waitress with 4 threads)",
            "workers": f"toplist serve (embedded: {os.cpu_count()} granian worker processes"
            " reading the snapshot files, the engine in its own process)",
        },
        "wrk": "2 threads; 100/s = 10 connections x 100 ms delay, 1000/s = 50 x 50 ms,"
        " 10000/s = 120 x 10 ms, max = 64 connections",
        "seconds_per_run": seconds,
        "runs": runs,
        "summary": summary,
        "max_ratio_to_nginx": {
            endpoint: by_load["max"]["workers"]["requests_per_second"]
            / by_load["max"]["nginx"]["requests_per_second"]
            for endpoint, by_load in summary.items()
        },
        "samples": samples,
    }


def render(report: dict) -> str:
    tables = []
    for endpoint, by_load in report["summary"].items():
        rows = []
        for load, by_server in by_load.items():
            one, workers = by_server["one process"], by_server["workers"]
            static = by_server["nginx"]
            rows.append(
                [
                    load,
                    one["requests_per_second"],
                    one["p99_ms"],
                    workers["requests_per_second"],
                    workers["p50_ms"],
                    workers["p99_ms"],
                    static["requests_per_second"],
                    static["p99_ms"],
                    workers["requests_per_second"] / static["requests_per_second"],
                ]
            )
        tables.append(
            table(
                f"Read path: GET {report['paths'][endpoint]}"
                f" ({report['body_bytes'][endpoint]:,} bytes) beside nginx, median of"
                f" {report['runs']} runs of {report['seconds_per_run']} s (targets: p99 <= 5 ms"
                " at 1000/s, <= 20 ms at 10000/s, max >= 0.3x nginx)",
                [
                    "load",
                    "one process req/s",
                    "one process p99 ms",
                    "workers req/s",
                    "workers p50 ms",
                    "workers p99 ms",
                    "nginx req/s",
                    "nginx p99 ms",
                    "workers / nginx",
                ],
                rows,
            )
        )
    return "\n\n".join(tables)


def main(argv: list[str] | None = None) -> int:
    parser = arguments("python -m bench.read_path", __doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    parser.add_argument("--setup", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.setup:
        setup(args.setup)
        return 0
    print(render(run(args.runs, args.duration)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
