"""Connecting the driver to Ray: join a cluster, reuse an embedding driver's Ray, or start one.

Order of precedence: ``--address``/``run.address``, then ``RAY_ADDRESS``, then a Ray the caller
already initialised (embedding: used and left running), else a local Ray sized from this
machine with the dashboard on 127.0.0.1 only, shut down when the run ends.

Before joining ``host:port``, the driver checks that something accepts connections there
(:func:`wait_for_gcs`, ``run.connect_timeout_s``): Ray's own client retries an address where
nothing listens forever, deaf to Ctrl-C. ``ray://`` (Ray Client) and ``auto`` are passed to Ray
unchecked.

Stopped (Ctrl-C, SIGTERM: :mod:`pipeline.cluster.stop`) while Ray starts, what it started goes too.
A local Ray has a watchdog (:mod:`pipeline.cluster.watchdog`): if the driver dies without
shutting it down (SIGKILL, a second Ctrl-C), its processes go within seconds.
"""

from __future__ import annotations

import ctypes.util
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from pipeline.cluster.stop import keep_sigterm
from pipeline.cluster.watchdog import OWNER, RayProcesses, terminate
from pipeline.config import ConfigError

logger = logging.getLogger(__name__)
_HANDED: list[int] = []  # the watchdog this process handed its local Ray to


@dataclass(frozen=True)
class RaySession:
    address: str
    mode: str  # "joined", "embedded" or "local"

    @property
    def logs(self) -> str | None:
        """This node's Ray session log folder (workers' stdout/stderr), when Ray says."""
        import ray

        node = getattr(ray._private.worker, "_global_node", None)  # no public API for this
        return node.get_logs_dir_path() if node is not None else None


def allocator_env(allocator: str) -> dict[str, dict[str, str]]:
    """The job's runtime env for ``run.allocator``: ``jemalloc`` preloads ``libjemalloc.so.2``
    into every worker process of the job (Train workers, Ray Data actors), by its soname so that
    each node's loader finds its own copy. A ``ConfigError`` when this machine has none."""
    if allocator == "system":
        return {}
    if ctypes.util.find_library("jemalloc") is None:
        raise ConfigError([f"run.allocator ({allocator!r}): libjemalloc.so.2 is not installed "
                           f"on this machine; install it (Debian/Ubuntu: apt-get install "
                           f"libjemalloc2) or set run.allocator=system"])
    return {"env_vars": {"LD_PRELOAD": "libjemalloc.so.2"}}


@contextmanager
def ray_driver_log(path: Path) -> Iterator[None]:
    """Ray's driver-side log lines (the ``ray`` logger: the token notice, "Started a local Ray
    instance", Train's driver messages; and ``ray.data``, which does not propagate: a ``ray``
    source's planning passes) go to ``path``; the console keeps only their errors. So does the
    driver's stdout: Ray prints its raylet's notices there ("N PYTHON worker processes have been
    started"); Feedline writes to stderr. Restored on the way out, for an embedding caller."""
    import ray.data  # noqa: F401  (installs both loggers' console handlers)

    loggers = [logging.getLogger(name) for name in ("ray", "ray.data")]
    levels = [(handler, handler.level) for log in loggers for handler in log.handlers
              if isinstance(handler, logging.StreamHandler)
              and not isinstance(handler, logging.FileHandler)]
    for handler, _ in levels:
        handler.setLevel(max(handler.level, logging.ERROR))
    to_file = logging.FileHandler(path)
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for log in loggers:
        log.addHandler(to_file)
    try:
        with redirect_stdout(to_file.stream):
            yield
    finally:
        for log in loggers:
            log.removeHandler(to_file)
        to_file.close()
        for handler, level in levels:
            handler.setLevel(level)


#: Seconds to wait for a cluster's GCS to accept a connection (``run.connect_timeout_s``).
CONNECT_TIMEOUT_S = 30.0


def wait_for_gcs(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Return once ``host:port`` accepts a TCP connection; a ``ConnectionError`` naming the
    address, the tries and the remedy after ``timeout_s``. Other address forms pass."""
    host, sep, port = address.rpartition(":")
    if "://" in address or not sep or not port.isdigit():
        return
    deadline, tries, last = time.monotonic() + timeout_s, 0, None
    while True:
        tries += 1
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host.strip("[]"), int(port)),
                                          timeout=max(0.1, min(2.0, left))):
                return
        except OSError as exc:
            last = exc
        if time.monotonic() + 0.5 >= deadline:
            break
        time.sleep(0.5)
    raise ConnectionError(
        f"run.address / --address / RAY_ADDRESS ({address!r}): nothing accepted a connection "
        f"there in {timeout_s:g} s ({tries} tries; last: {last}). Start the cluster (`ray start "
        f"--head` on that machine), check the host and GCS port (`ray status` on the head "
        f"prints it), or leave the address empty for a local Ray; run.connect_timeout_s sets "
        f"the wait")


@contextmanager
def ray_session(address: str | None = "", num_cpus: int = 0, *, dashboard: bool = True,
                log_to_driver: bool = False, connect_timeout_s: float = CONNECT_TIMEOUT_S,
                allocator: str = "system", hand_over: bool = False) -> Iterator[RaySession]:
    """Connect for the duration of the block; disconnect (or stop) only what this call started.
    ``hand_over`` (a process that exits right after, with :func:`exit_now`): a local Ray the
    block ended without an error is left to its watchdog to stop.

    Workers' output stays in Ray's log folder (``RaySession.logs``) unless ``log_to_driver``:
    the console shows Feedline's progress, results, warnings and errors, not Ray's chatter.
    ``allocator`` (``run.allocator``) is the job's runtime env: an embedding driver's Ray keeps
    its own, with a warning."""
    import ray

    runtime_env = allocator_env(allocator)
    address = address or os.environ.get("RAY_ADDRESS", "")
    if address == "local":  # Ray's own word for "start a new local cluster"
        address = ""
    if ray.is_initialized():
        if runtime_env and ray.get_runtime_context().runtime_env.get("env_vars", {}).get(
                "LD_PRELOAD") != runtime_env["env_vars"]["LD_PRELOAD"]:
            logger.warning("run.allocator=%s is not applied to a Ray the caller initialised: "
                           "pass runtime_env=%r to your ray.init", allocator, runtime_env)
        yield RaySession(ray.get_runtime_context().gcs_address, "embedded")
        return
    if address:
        wait_for_gcs(address, connect_timeout_s)
        _init(address=address, log_to_driver=log_to_driver, runtime_env=runtime_env)
        mode = "joined"
    else:
        cpus = num_cpus or os.cpu_count() or 1
        # Every process of this Ray inherits the token: the watchdog's way to find them all.
        token = secrets.token_hex(8)
        with _environment({OWNER: token} | local_ray_env()):
            # The dashboard serves Ray's state API and job submission: loopback only. Ray binds
            # its gRPC servers and metrics exporters to all interfaces whatever we ask (README,
            # Security). address="local": never attach to a Ray `ray start` left here.
            _init(address="local", num_cpus=cpus, include_dashboard=dashboard,
                  dashboard_host="127.0.0.1", log_to_driver=log_to_driver,
                  runtime_env=runtime_env, token=token)
        mode = "local"
    watchdog = start_watchdog(token) if mode == "local" else None
    try:
        yield RaySession(ray.get_runtime_context().gcs_address, mode)
    except BaseException:
        ray.shutdown()
        stop_watchdog(watchdog)
        raise
    if hand_over and watchdog is not None:
        # the run is done: its watchdog stops this Ray once the process has exited
        # (:func:`exit_now`), so the user waits for neither Ray's shutdown nor its agents
        watchdog.send_signal(signal.SIGUSR1)
        _HANDED.append(watchdog.pid)
        return
    ray.shutdown()
    stop_watchdog(watchdog)


FOOTER_ACTORS = "RAY_DATA_PARQUET_FOOTER_NUM_ACTORS"
PREEMPTION_WATCHER = "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"


def local_ray_env() -> dict[str, str]:
    """What a local Ray's processes inherit beyond this one's environment; a variable the
    environment already sets stays the user's choice.

    - ``RAY_DATA_PARQUET_FOOTER_NUM_ACTORS``: Ray 2.60's ``read_parquet`` lists files through
      that many footer-reading actors (32 by default), started anew by every execution; on a
      machine of a few cores starting them is most of a small dataset's read (a 3-file
      dataset's ``schema()`` on 2 cores: 7.2 s, 1.5 s with 2). One per core, up to Ray's 32.
    - ``RAY_TRAIN_ENABLE_PREEMPTION_WATCHER=0``: Ray Train starts an actor per run that polls
      the worker group's nodes for a drain notice (a spot instance's preemption, an autoscaler
      taking the node back). A local Ray is this one machine, which nothing drains; the actor
      is a process and 1.5 s of CPU per run for nothing."""
    values = {FOOTER_ACTORS: str(min(32, os.cpu_count() or 1)), PREEMPTION_WATCHER: "0"}
    return {key: value for key, value in values.items() if key not in os.environ}


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in ``os.environ`` for the block (what Ray starts inherits them), then the
    environment as it was."""
    outer = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in outer.items():
            if value is None:
                os.environ.pop(key)
            else:
                os.environ[key] = value


def exit_now(code: int) -> None:
    """End this process with ``code`` at once when it handed its local Ray to the watchdog
    (``ray_session(hand_over=True)``): Ray's own shutdown at exit is what it saves."""
    if _HANDED:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _init(token: str | None = None, **kwargs) -> None:
    """``ray.init``, stoppable: stopped (Ctrl-C, SIGTERM) while Ray starts, what it started
    goes too, and the caller's SIGTERM handler stays in place (:func:`keep_sigterm`). For a
    local Ray started with ``token`` in its environment, that includes the agents its raylet
    started, which outlive it by a minute (found while the raylet lives: they are its
    children)."""
    import ray

    try:
        with keep_sigterm():
            ray.init(**kwargs)
    except BaseException:
        started = RayProcesses(token) if token else None
        if started is not None:
            started.scan()
        ray.shutdown()
        if started is not None:
            terminate(started)
        raise


def start_watchdog(token: str) -> subprocess.Popen | None:
    """:mod:`pipeline.cluster.watchdog` for the local Ray this process just started with
    ``token`` in its environment: if this process dies without shutting that Ray down, its
    processes go within seconds."""
    import ray

    node = getattr(ray._private.worker, "_global_node", None)  # no public API for this
    if node is None:
        return None
    with open(Path(node.get_logs_dir_path()) / "feedline-watchdog.err", "ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "pipeline.cluster.watchdog", str(os.getpid()), token],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            start_new_session=True)  # a terminal's Ctrl-C is for the driver, not for it


def stop_watchdog(watchdog: subprocess.Popen | None) -> None:
    """Release the watchdog: it stops what ``ray.shutdown`` left running, even if this process
    dies meanwhile (a second Ctrl-C)."""
    if watchdog is not None:
        watchdog.terminate()
        watchdog.wait()
