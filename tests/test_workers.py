"""`toplist run` with API worker processes (api/workers.py), as users run it: the engine in
one process, publishing every second, and two granian workers serving the reads from the
snapshot files. Which worker answered a connection is read from /proc (the process holding
the server side of the socket), so every claim is checked for each worker."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

import pytest
from kafka_support import wait_for
from live_api import AS_OF, BUYER, board_listens, load_other_boards

from api import snapshots
from api.app import create_app
from ingest.kafka_broker import free_port
from ingest.load import load_lines
from publish.publisher import publish

pytestmark = pytest.mark.embedded_only
WORKERS = 2
TOKEN = "workers-test-token"


def test_the_snapshot_files_answer_as_the_registry_does(client, config):
    """A worker's answers (from the snapshot files) are the engine's (from the registry), byte
    for byte, on every board; asked again (the hot path), the same."""
    load_lines(client, config.database, board_listens())
    publish(client, config, AS_OF)
    load_other_boards(client, config)
    registry = create_app(config).test_client()
    files = create_app(config, files=config.snapshot_files).test_client()
    urls = [
        "/v1/charts/SE",
        "/v1/charts/global?window=1h&k=3&policy=v1-ties",
        "/v1/charts/SE/songs/se-day-anthem?window=7d",
        "/v1/charts/SE/songs/no-such-song",
        "/v1/charts/SE/songs/se-day-anthem/around?n=1",
        "/v1/charts/global?k=2&offset=1",
        "/v1/topk?scope=global&metric=views&window=1d&k=2&offset=3",
        f"/v1/sale/buyers/{BUYER}/around",
        "/v1/charts/ZZ",
        "/v1/scopes",
        "/v1/listeners?k=5",
        "/v1/sale/products?k=3",
        "/v1/sale/buyers?k=2",
        f"/v1/sale/buyers/{BUYER}",
        "/v1/sale/products/no-such-product",
        "/v1/topk?scope=city:sf&metric=views&window=1h&k=5",
        "/v1/topk?scope=global&metric=orders&window=1d",
        "/v1/topk?scope=restaurant:r01",
    ]
    for url in urls:
        expected = registry.get(url)
        for _ in range(2):
            answer = files.get(url)
            assert (answer.status_code, answer.get_data()) == (
                expected.status_code,
                expected.get_data(),
            ), url
            if "/topk" not in url:  # a shelf is cached only where its catalog rows came along
                assert answer.headers.get("ETag") == expected.headers.get("ETag"), url
    url = "/v1/topk?scope=city:sf&metric=views&window=1h&k=5"
    again = files.get(url, headers={"If-None-Match": files.get(url).headers["ETag"]})
    assert again.status_code == 304


@dataclass
class Service:
    port: int
    process: subprocess.Popen

    def workers(self) -> set[int]:
        """The granian worker processes (children of the server process under `toplist`)."""
        (server,) = [
            child for child in _children(self.process.pid) if b"granian" in _cmdline(child)
        ]
        return _children(server)

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict, int]:
        """(status, JSON body, the pid of the worker that answered), on a fresh connection."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request("GET", path, headers=headers or {})
            response = connection.getresponse()
            body = json.loads(response.read() or b"null")
            worker = _process_of(connection.sock, self.port, self.workers())
            return response.status, body, worker
        finally:
            connection.close()


def _children(pid: int) -> set[int]:
    children: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children.update(int(child) for child in (task / "children").read_text().split())
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
    return children


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:  # a process that ended meanwhile
        return b""


def _process_of(sock: socket.socket, server_port: int, pids: set[int]) -> int:
    """Which of `pids` holds the server side of the connection `sock` is the client side of."""
    client_port = sock.getsockname()[1]
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1], fields[2]
        if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == (
            client_port
        ):
            inode = fields[9]
    assert inode is not None, "the server side of the connection is not in /proc/net/tcp"
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                if os.readlink(fd) == f"socket:[{inode}]":
                    return pid
            except OSError:
                continue
    raise AssertionError("no worker process holds the connection")


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Iterator[Service]:
    work = tmp_path_factory.mktemp("workers")
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TOPLIST_")},
        "TOPLIST_CLICKHOUSE_URL": f"chdb://{work / 'data'}",
        "TOPLIST_INTERNAL_TOKEN": TOKEN,
        "TOPLIST_PUBLISH_WAIT_SECONDS": "20",
    }
    command = [sys.executable, "-m", "toplist.cli", "run", "--port", str(port)]
    command += ["--workers", str(WORKERS), "--publish-every", "1", "--history", "20000"]
    command += ["--rate", "200"]
    log = (work / "run.log").open("w")
    process = subprocess.Popen(
        command, env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT, text=True
    )
    service = Service(port, process)
    try:

        def answers() -> bool:
            try:
                return service.get("/v1/charts/global")[0] == 200
            except (OSError, AssertionError, ValueError):
                return False

        wait_for(answers, 180, "the service to answer a chart")
        yield service
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
        print((work / "run.log").read_text()[-3000:])


@dataclass
class Answer:
    worker: int
    received: float  # Unix time
    path: str
    body: dict


@pytest.fixture(scope="module")
def hammered(service: Service) -> list[Answer]:
    """Ten seconds of reads on fresh connections while every board publishes (the charts and
    the sale every second, live listeners every 2 s, the shelves every 10 s)."""
    assert len(service.workers()) == WORKERS
    published: set[str] = set()

    def publishing() -> bool:  # past the first publications (each compiles its board's plan)
        published.add(service.get("/healthz")[1]["boards"]["charts"]["snapshot_id"])
        return len(published) >= 3

    wait_for(publishing, 120, "the charts to be published every second or so")
    song = service.get("/v1/charts/global")[1]["items"][0]["song_id"]
    paths = [
        "/v1/charts/global?k=20",
        f"/v1/charts/global/songs/{song}",
        "/v1/scopes",
        "/v1/listeners?k=3",
        "/v1/sale/products?k=3",
        "/v1/topk?scope=global&metric=views&window=1d&k=3",
    ]
    answers: list[Answer] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for path in paths:
            status, body, worker = service.get(path)
            assert status == 200, body
            answers.append(Answer(worker, time.time(), path, body))
        time.sleep(0.01)
    return answers


def _published(body: dict) -> float:
    return datetime.fromisoformat(body["published_at"]).timestamp()


def _board(answer: Answer) -> str:
    return answer.body["snapshot_id"].split("-")[0]


def test_every_worker_serves_a_publication_within_a_second_of_it(hammered):
    by_worker = defaultdict(list)
    publications: dict[str, set[float]] = defaultdict(set)
    for answer in hammered:
        by_worker[answer.worker].append(answer)
        publications[_board(answer)].add(_published(answer.body))
    assert len(by_worker) == WORKERS, "every worker answered some of the reads"
    for board, least in (("charts", 4), ("sale", 4), ("listeners", 3), ("popular", 1)):
        assert len(publications[board]) >= least, f"{board} was published meanwhile"
    for worker, answers in by_worker.items():
        for answer in answers:
            # the newest publication of its board made at least a second before this answer
            due = max(
                (p for p in publications[_board(answer)] if p <= answer.received - 1.0),
                default=0.0,
            )
            assert _published(answer.body) >= due, (
                f"worker {worker} served {answer.body['snapshot_id']} at {answer.received:.3f},"
                f" over a second after a newer one was published ({due:.3f})"
            )
        for board in ("charts", "sale"):
            seen = {a.body["snapshot_id"] for a in answers if _board(a) == board}
            assert len(seen) >= 3, f"worker {worker} followed the {board} ({len(seen)} seen)"


def test_no_answer_mixes_two_snapshots(hammered):
    charts: dict[str, dict] = {}
    for answer in hammered:
        if answer.path.startswith("/v1/charts/global?"):
            items = answer.body["items"]
            first = charts.setdefault(answer.body["snapshot_id"], answer.body)
            assert items == first["items"], "two answers under one snapshot_id differ"
    assert len(charts) >= 3
    for answer in hammered:
        if "/songs/" in answer.path:
            chart = charts.get(answer.body["snapshot_id"])
            if chart is None:
                continue
            (entry,) = [e for e in chart["items"] if e["song_id"] == answer.body["song_id"]]
            assert (answer.body["rank"], answer.body["listens"]) == (
                entry["rank"],
                entry["listens"],
            ), "a rank lookup disagrees with the chart of its own snapshot"


def test_idle_and_slow_connections_do_not_starve_a_reader(service):
    idle = []
    try:
        for n in range(200):
            sock = socket.create_connection(("127.0.0.1", service.port), timeout=5)
            if n % 2:  # a slow client: half a request, then nothing
                sock.sendall(b"GET /v1/charts/global HTTP/1.1\r\nHost: toplist\r\n")
            idle.append(sock)
        for path in ("/v1/charts/global", "/healthz"):
            started = time.monotonic()
            status, _, _ = service.get(path)
            took = time.monotonic() - started
            assert status == 200 and took < 1.0, f"{path}: {status} after {took:.2f} s"
    finally:
        for sock in idle:
            sock.close()


def test_health_metrics_and_corrections_describe_the_whole_service(service):
    workers: set[int] = set()
    for _ in range(40):
        status, _, worker = service.get("/v1/scopes?n=metrics")
        assert status == 200
        workers.add(worker)
    assert len(workers) == WORKERS
    connection = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
    connection.request("GET", "/metrics")
    metrics = connection.getresponse().read().decode()
    connection.close()
    (line,) = [
        line
        for line in metrics.splitlines()
        if line.startswith('toplist_http_requests_total{endpoint="/v1/scopes",status="200"}')
    ]
    assert float(line.split()[-1]) >= 40, "the requests of every worker are counted"
    assert "toplist_snapshot_age_seconds" in metrics  # the engine's figures too

    connection = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
    connection.request("GET", "/")
    page = connection.getresponse()
    assert page.status == 200 and b"<html" in page.read().lower()  # the web page
    connection.request("GET", "/v1/charts/global")
    first = connection.getresponse()
    first.read()
    etag = first.getheader("ETag")
    connection.request("GET", "/v1/charts/global", headers={"If-None-Match": etag})
    again = connection.getresponse()
    again.read()
    connection.close()
    assert again.status == 304 or again.getheader("ETag") != etag  # unless just republished

    status, health, _ = service.get("/healthz")
    assert status == 200 and health["boards"]["charts"]["snapshot_id"].startswith("charts-")

    # A song's series is read from the buckets: a worker passes it to the engine's process.
    song = service.get("/v1/charts/global?window=all&k=1")[1]["items"][0]["song_id"]
    status, series, _ = service.get(f"/v1/charts/global/songs/{quote(song)}/series?window=all")
    assert status == 200, series
    # (the buckets as they are now: late listens that arrived since the publication count)
    assert sum(point["listens"] for point in series["points"]) >= series["listens"] > 0

    status, refused, _ = service.get("/internal/corrections")
    assert status in (401, 405) and "error" in refused  # the engine's answer, passed on
    connection = http.client.HTTPConnection("127.0.0.1", service.port, timeout=60)
    connection.request(
        "POST",
        "/internal/corrections",
        body=json.dumps({"event_ids": ["no-such-event"], "reason": "test", "publish": True}),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    response = connection.getresponse()
    body = json.loads(response.read())
    connection.close()
    assert response.status == 200, body
    published = body["snapshot"]["snapshot_id"]
    time.sleep(1.0)
    for _ in range(20):  # within a second, every worker serves it or a newer one
        _, chart, _ = service.get("/v1/charts/global")
        assert (
            _published(chart)
            >= datetime.fromisoformat(body["snapshot"]["published_at"]).timestamp()
        ), f"still serving {chart['snapshot_id']}, older than {published}"


def test_kept_answers_are_bounded_by_their_bytes():
    """A crawler asking for every k of every scope cannot grow a worker without bound: the
    answers kept for the hot path start over past ANSWERS_BYTES."""
    answers = snapshots.Answers()
    body = b"x" * (snapshots.ANSWERS_BYTES // 2 + 1)  # one object: the test itself stays small
    answer = snapshots.Answer(None, None, False, body, "/")  # type: ignore[arg-type]
    for n in range(6):
        answers.keep({"PATH_INFO": f"/v1/charts/SE?k={n}"}, answer)
    kept = [n for n in range(6) if answers.get({"PATH_INFO": f"/v1/charts/SE?k={n}"})]
    assert len(kept) * len(body) <= snapshots.ANSWERS_BYTES + len(body)
    assert kept[-1] == 5, "the newest answer is kept"


def test_a_restart_waits_for_the_port_a_killed_server_still_holds():
    """A server killed with -9 takes its workers with it, but they finish their requests first
    (seen in CI: the restarted `toplist serve` found the port still taken, refused to serve,
    and the API never came back). A port freed within the wait is taken; one held throughout
    is refused, in one line."""
    import threading

    from api.server import ServeError, _check_free

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    port = held.getsockname()[1]
    threading.Timer(1.0, held.close).start()
    started = time.monotonic()
    _check_free("127.0.0.1", port, wait_seconds=30)
    assert 0.8 < time.monotonic() - started < 20, "did not wait for the port, or not return"

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(ServeError, match="cannot serve on 127.0.0.1:.*in use"):
            _check_free("127.0.0.1", taken.getsockname()[1], wait_seconds=0.5)
