"""Serving the app: with production servers, in this process (waitress) or in worker
processes beside it (granian, api/workers.py)."""

from __future__ import annotations

import errno
import gc
import logging
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from flask import Flask

from api.workers import CONFIG_ENV, ENGINE_ENV
from toplist.config import Config

log = logging.getLogger(__name__)

# How long a port in use is waited for before serving is refused (`_check_free`): longer
# than the workers' kill timeout below.
PORT_WAIT_SECONDS = 15

# Request threads; more only adds GIL contention on 2 cores (reads are dictionary lookups in
# the snapshot cache).
API_THREADS = 4
# Request threads of each worker process: a read takes microseconds, so a few are enough to
# keep a request that waits on the engine (a correction waiting for its publication) from
# holding up the reads behind it.
WORKER_THREADS = 4


class ServeError(RuntimeError):
    """The server could not start (a port in use, a worker that failed to start)."""


def serve(app: Flask, host: str, port: int, ready: Callable[[], None] = lambda: None) -> None:
    """Serve until Ctrl-C or SIGTERM (raised as KeyboardInterrupt), which finishes the
    requests in flight and returns. `ready` runs once the port is bound."""
    from waitress import create_server

    server = create_server(app, host=host, port=port, threads=API_THREADS, ident="toplist")
    ready()
    _freeze()
    server.run()


def _freeze() -> None:
    # Everything loaded so far (the engine, Flask, the app and its snapshot) lives as long as
    # the process: out of the collector's sight, a full collection no longer walks it (one took
    # 21 ms in a serving process with ~59k objects tracked, a pause every reader then waits out).
    gc.collect()
    gc.freeze()


def serve_workers(
    engine_app: Flask,
    config: Config,
    host: str,
    port: int,
    workers: int,
    ready: Callable[[], None] = lambda: None,
) -> None:
    """Serve `engine_app` (the full app, over the engine) on a private port in this process,
    and the API on host:port from `workers` granian processes that read the snapshot files
    and pass what needs the engine to it. Returns on Ctrl-C or SIGTERM (as KeyboardInterrupt)
    once the workers have finished their requests."""
    from waitress import create_server

    _check_free(host, port)
    engine = create_server(
        engine_app, host="127.0.0.1", port=0, threads=API_THREADS, ident="toplist-engine"
    )
    threading.Thread(target=engine.run, name="engine-app", daemon=True).start()
    run = Path(tempfile.mkdtemp(prefix="toplist-serve-"))
    (run / "config.pickle").write_bytes(pickle.dumps(config))
    env = {
        **os.environ,
        CONFIG_ENV: str(run / "config.pickle"),
        ENGINE_ENV: f"http://127.0.0.1:{engine.effective_port}",
    }
    command = [
        sys.executable,
        "-m",
        "granian",
        "--interface", "wsgi",
        "--factory",
        "--workers", str(workers),
        "--blocking-threads", str(WORKER_THREADS),
        "--host", host,
        "--port", str(port),
        "--no-ws",
        "--log-level", "warning",
        "--respawn-failed-workers",
        "--workers-kill-timeout", "10",
        "api.workers:create_worker_app",
    ]  # fmt: skip
    # The workers go when this process goes, even killed (prctl PR_SET_PDEATHSIG: SIGTERM).
    process = subprocess.Popen(command, env=env, preexec_fn=_end_with_parent)
    try:
        _wait_until_listening(process, host, port)
        ready()
        _freeze()
        process.wait()
    except KeyboardInterrupt:
        process.terminate()  # granian stops its workers once their requests are answered
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        engine.close()
        shutil.rmtree(run, ignore_errors=True)


def _end_with_parent() -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def _check_free(host: str, port: int, wait_seconds: float = PORT_WAIT_SECONDS) -> None:
    """Return once host:port can be bound. A port in use is waited for `wait_seconds`: the
    workers of a server that was killed end with it, but finish their requests first (up to
    granian's --workers-kill-timeout), so a restart right after a crash finds them still
    holding it. Then refuse in one line."""
    deadline = time.monotonic() + wait_seconds
    said = False
    while True:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
                return
            except OSError as error:
                if error.errno != errno.EADDRINUSE or time.monotonic() >= deadline:
                    raise ServeError(f"cannot serve on {host}:{port}: {error.strerror}") from None
        if not said:
            log.warning(
                "%s:%d is in use; waiting up to %g s for it (a stopped server's workers may"
                " still be finishing)",
                host,
                port,
                wait_seconds,
            )
            said = True
        time.sleep(0.2)


def _wait_until_listening(process: subprocess.Popen, host: str, port: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServeError(
                f"the API workers exited at start (code {process.returncode}); see above"
            )
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise ServeError(f"the API workers did not listen on {host}:{port} within 60 s")
