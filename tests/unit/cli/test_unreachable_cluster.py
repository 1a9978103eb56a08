"""An address where no cluster answers fails in bounded time, naming the address, with exit 4,
instead of Ray's endless retries (a real ``pipeline run`` process, a real closed port)."""

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def closed_port() -> int:
    with socket.socket() as sock:  # a port the kernel just handed out and nobody listens on
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.timeout(120)
def test_an_unreachable_address_fails_within_the_connect_timeout(tmp_path):
    address = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(ROOT / "examples/quickstart.yaml"),
         "--address", address, "--set", "run.connect_timeout_s=3",
         "--output", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=100, cwd=ROOT)
    took = time.monotonic() - started
    assert proc.returncode == 4, proc.stderr
    assert f"cluster unreachable: run.address / --address / RAY_ADDRESS ('{address}')" \
        in proc.stderr
    assert "nothing accepted a connection there in 3 s" in proc.stderr
    assert "Traceback" not in proc.stderr and "ray:" not in proc.stderr  # never joined
    assert took < 60, took  # the bound is what is tested, not the speed: Ray's retries are endless
