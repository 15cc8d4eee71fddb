"""Read path: GET /v1/charts/<country> under wrk, beside nginx serving the same JSON as a file.

Usage: python -m bench.read_path [--runs R] [--duration S]

A fresh engine gets 1M generated events and one published snapshot (in a child process, since
one process owns a chDB data directory); then `toplist serve` runs on it as users run it
(embedded: one process, waitress with 4 request threads, the snapshot cache of api/snapshots.py),
and nginx (2 workers, access log off) serves the body of /v1/charts/SE from a file. wrk
(2 threads) drives each at about 100 and 1000 req/s (a fixed per-request delay on a fixed
number of connections, wrk's own rate control) and at the most it can (64 connections).
wrk, the server and nginx share the machine's cores.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from bench.common import arguments, bench_config, median, say, scratch, table, wait_for_url
from ingest.kafka_broker import free_port

# target -> (connections, delay in ms between a connection's requests; None = flat out)
LOADS = {"100/s": (10, 100), "1000/s": (50, 50), "max": (64, None)}
SCOPE = "SE"


def setup(directory: Path) -> None:
    """Child process: 1M events and one published snapshot in `directory`."""
    from bench.publication import generate
    from publish.publisher import publish
    from toplist.engine import connect
    from toplist.migrate import migrate

    config = bench_config(directory)
    client = connect(config)
    migrate(client, config)
    now = datetime.now(UTC)
    generate(client, config.database, 0, 1_000_000, now, 10_000, False)
    publish(client, config)
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


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()
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
        "p50_ms": _ms(latency["50"]),
        "p99_ms": _ms(latency["99"]),
        "non_2xx": int(errors.group(1)) if errors else 0,
    }


def run(runs: int, seconds: int = 10) -> dict:
    if not (shutil.which("wrk") and shutil.which("nginx")):
        raise SystemExit("the read path needs wrk and nginx: `make bench` installs them")
    work = scratch("read")
    say("read path: 1M events and a snapshot ...")
    subprocess.run(
        [sys.executable, "-m", "bench.read_path", "--setup", str(work / "data")], check=True
    )
    api_port, nginx_port = free_port(), free_port()
    env = {
        **os.environ,
        "TOPLIST_CLICKHOUSE_URL": f"chdb://{work / 'data'}",
        "TOPLIST_POLICIES": "v1",
    }
    api = subprocess.Popen(
        [sys.executable, "-m", "toplist.cli", "serve", "--port", str(api_port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    servers = {"api": f"http://127.0.0.1:{api_port}/v1/charts/{SCOPE}"}
    nginx = None
    try:
        body = wait_for_url(servers["api"])
        (work / "www").mkdir()
        (work / "www" / f"{SCOPE}.json").write_bytes(body)
        nginx = _nginx(work, nginx_port)
        servers["nginx"] = f"http://127.0.0.1:{nginx_port}/{SCOPE}.json"
        wait_for_url(servers["nginx"])
        samples: dict[str, dict[str, list[dict]]] = {
            load: {name: [] for name in servers} for load in LOADS
        }
        for n in range(runs):
            for load, (connections, delay) in LOADS.items():
                for name, url in servers.items():
                    result = wrk(url, connections, delay, seconds, work / "delay.lua")
                    samples[load][name].append(result)
                    say(
                        f"read run {n + 1}/{runs}: {name:<6}{load:>7}"
                        f"  {result['requests_per_second']:>9,.0f} req/s"
                        f"  p50 {result['p50_ms']:.2f} ms  p99 {result['p99_ms']:.2f} ms"
                    )
    finally:
        for process in (api, nginx):
            if process:
                process.send_signal(signal.SIGTERM)
                process.wait(30)
    summary = {
        load: {
            name: {key: median([s[key] for s in values]) for key in values[0]}
            for name, values in by_server.items()
        }
        for load, by_server in samples.items()
    }
    return {
        "body_bytes": len(body),
        "url": f"/v1/charts/{SCOPE}",
        "api_server": "toplist serve (embedded: 1 process, waitress with 4 threads)",
        "wrk": "2 threads; 100/s = 10 connections x 100 ms delay, 1000/s = 50 x 50 ms,"
        " max = 64 connections",
        "seconds_per_run": seconds,
        "runs": runs,
        "summary": summary,
        "max_ratio_to_nginx": summary["max"]["api"]["requests_per_second"]
        / summary["max"]["nginx"]["requests_per_second"],
        "samples": samples,
    }


def render(report: dict) -> str:
    rows = []
    for load, by_server in report["summary"].items():
        api, static = by_server["api"], by_server["nginx"]
        rows.append(
            [
                load,
                api["requests_per_second"],
                api["p50_ms"],
                api["p99_ms"],
                static["requests_per_second"],
                static["p50_ms"],
                static["p99_ms"],
                api["requests_per_second"] / static["requests_per_second"],
            ]
        )
    return table(
        f"Read path: GET {report['url']} ({report['body_bytes']:,} bytes) beside nginx,"
        f" median of {report['runs']} runs of {report['seconds_per_run']} s"
        " (targets: p99 <= 5 ms at 1000/s, max >= 0.3x nginx)",
        [
            "load",
            "api req/s",
            "api p50 ms",
            "api p99 ms",
            "nginx req/s",
            "nginx p50 ms",
            "nginx p99 ms",
            "api / nginx",
        ],
        rows,
    )


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
