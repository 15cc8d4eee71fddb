"""Running a benchmark as its users do (`python -m bench.<name> ...`), at a tiny size, to keep
it from rotting; the tests check what it printed, never its timings."""

from __future__ import annotations

import subprocess
import sys

from toplist.config import PROJECT_ROOT


def run_bench(module: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m bench.<module> args`, from the project root; fails the test on a non-zero
    exit with what it printed."""
    run = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run
