"""A real single-node Apache Kafka broker (KRaft) for development and tests.

Fetches the pinned broker jars from Maven Central with Maven into a cache directory, formats
a KRaft log directory, starts the broker on 127.0.0.1 on free ports, waits until it answers,
and stops it. Usage: `python -m ingest.kafka_broker start|stop|status [--dir DIR]`.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.24.3"
DEFAULT_CACHE = Path(os.environ.get("TOPLIST_KAFKA_CACHE", Path.home() / ".cache" / "toplist"))
DEFAULT_DIR = Path.cwd() / ".toplist" / "kafka"

_POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>toplist</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j2-impl</artifactId><version>{LOG4J_VERSION}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId><version>{LOG4J_VERSION}</version></dependency>
  </dependencies>
</project>
"""


class BrokerError(RuntimeError):
    """The broker could not be fetched, formatted or started."""


def fetch_jars(cache: Path = DEFAULT_CACHE) -> Path:
    """The directory of the broker's jars, fetched with Maven on first use."""
    libs = cache / f"kafka-{KAFKA_VERSION}" / "libs"
    done = libs / ".complete"
    if done.exists():
        return libs
    project = libs.parent
    project.mkdir(parents=True, exist_ok=True)
    (project / "pom.xml").write_text(_POM)
    print(
        f"fetching Apache Kafka {KAFKA_VERSION} jars with Maven into {libs} ...",
        file=sys.stderr,
        flush=True,
    )
    result = subprocess.run(
        ["mvn", "-q", "-B", "dependency:copy-dependencies", f"-DoutputDirectory={libs}"],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise BrokerError(f"mvn could not fetch the Kafka jars:\n{result.stdout[-2000:]}")
    done.touch()
    return libs


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class Broker:
    directory: Path
    libs: Path
    port: int
    controller_port: int
    process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def classpath(self) -> str:
        return f"{self.libs}/*"

    def stop(self, timeout: float = 30) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        (self.directory / "broker.pid").unlink(missing_ok=True)

    def start(self, wait: float = 90) -> None:
        """Start (or restart, keeping its data) the broker and wait until it answers."""
        config = self.directory / "server.properties"
        # The broker keeps its own copy of the log's file descriptor; ours can close.
        with open(self.directory / "broker.log", "ab") as log:
            self.process = subprocess.Popen(
                ["java", "-Xmx512m", "-cp", self.classpath, "kafka.Kafka", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        (self.directory / "broker.pid").write_text(str(self.process.pid))
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerError(f"the broker exited; see {self.directory / 'broker.log'}")
            if _answers(self.port):
                return
            time.sleep(0.25)
        self.stop()
        raise BrokerError(f"the broker did not answer within {wait:g} s")


def start_broker(directory: Path = DEFAULT_DIR, cache: Path = DEFAULT_CACHE) -> Broker:
    """Fetch, format a fresh KRaft log directory in `directory`, start, wait until it answers."""
    directory.mkdir(parents=True, exist_ok=True)
    broker = Broker(directory, fetch_jars(cache), free_port(), free_port())
    data = directory / "data"
    (directory / "server.properties").write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{broker.controller_port}",
                f"listeners=PLAINTEXT://127.0.0.1:{broker.port},"
                f"CONTROLLER://127.0.0.1:{broker.controller_port}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{broker.port}",
                "controller.listener.names=CONTROLLER",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                f"log.dirs={data}",
                "offsets.topic.replication.factor=1",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                "num.partitions=4",
                "",
            ]
        )
    )
    cluster_id = subprocess.run(
        ["java", "-cp", broker.classpath, "kafka.tools.StorageTool", "random-uuid"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[-1]
    formatted = subprocess.run(
        [
            "java",
            "-cp",
            broker.classpath,
            "kafka.tools.StorageTool",
            "format",
            "--ignore-formatted",
            "-t",
            cluster_id,
            "-c",
            str(directory / "server.properties"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if formatted.returncode != 0:
        raise BrokerError(f"formatting the KRaft log directory failed: {formatted.stdout}")
    broker.start()
    (directory / "bootstrap").write_text(broker.bootstrap)
    return broker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ingest.kafka_broker",
        description="A single-node Kafka broker (KRaft) for"
        " development: start prints its bootstrap address.",
    )
    parser.add_argument("action", choices=["fetch", "start", "stop", "status"])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="broker directory")
    args = parser.parse_args(argv)
    pid_file = args.dir / "broker.pid"
    if args.action == "fetch":
        print(fetch_jars())
    elif args.action == "start":
        broker = start_broker(args.dir)
        broker.process = None  # leave it running after this command exits
        print(broker.bootstrap)
    elif args.action == "stop":
        if pid_file.exists():
            os.killpg(int(pid_file.read_text()), signal.SIGTERM)
            pid_file.unlink()
    else:
        running = pid_file.exists() and Path(f"/proc/{pid_file.read_text()}").exists()
        bootstrap = (args.dir / "bootstrap").read_text() if running else "-"
        print(f"running at {bootstrap}" if running else "not running")
        return 0 if running else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
