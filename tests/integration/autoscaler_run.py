"""Run in a process of its own: the pool controller's requests against Ray's fake multi-node
autoscaler (the provider Ray's own autoscaler tests use). Prints one JSON line.

A head without CPUs, a ``train`` node type and a ``preprocess`` node type (labels and
resources as in cluster.yaml), none started. The controller is fed the pulses of a run whose
trainers starve while its one decode actor is busy: it grows the pool past the cluster's CPUs
and asks for preprocessing bundles; the autoscaler starts a ``preprocess`` node, an actor placed
like a decode actor runs there, and the pool's CPU limit follows the new node. Then the pulses
of fed trainers: the controller withdraws its request and the idle node is removed.

``ray.cluster_utils.AutoscalingCluster`` cannot be used as it is in Ray 2.60: it runs
``ray stop --force`` (every Ray process on the machine) and reads a
``fake_multi_node/example.yaml`` the wheel does not ship. :class:`FakeCluster` starts the same
head (``ray start --head --autoscaling-config``) with the provider named by module, on a free
port and its own temporary folder, in a session of its own that it ends by process id.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["RAY_AUTH_MODE"] = "disabled"  # a head from `ray start` and this driver must agree

import ray  # noqa: E402
from rich.console import Console  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from pipeline.config import load_config  # noqa: E402
from pipeline.job.inbox import RunInbox  # noqa: E402
from pipeline.messages import DecodeBusy, RankWait  # noqa: E402
from pipeline.pool.controller import PoolController  # noqa: E402

HEAD_ID = "fffffffffffffffffffffffffffffffffffffffffffffffffff00000"  # what the provider expects
STORE = 100 * 1024**2
NODE_TYPES = {
    "preprocess": {"resources": {"CPU": 2, "feedline_preprocess": 1000,
                                 "object_store_memory": STORE},
                   "labels": {"feedline.io/role": "preprocess"}, "min_workers": 0,
                   "max_workers": 2, "node_config": {}},
    "train": {"resources": {"CPU": 2, "feedline_train": 1000, "object_store_memory": STORE},
              "labels": {"feedline.io/role": "train"}, "min_workers": 0, "max_workers": 1,
              "node_config": {}},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _session_pids(sid: int) -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        try:
            fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(d))
    return pids


class FakeCluster:
    def __init__(self):
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        # not under pytest's tmp_path: Ray's socket paths below it must stay under 108 bytes
        self.temp = Path(tempfile.mkdtemp(prefix="feedline-fake-"))
        self.sid = None

    def start(self) -> None:
        provider = {"type": "external", "use_node_id_as_ip": True,
                    "module": "ray.autoscaler._private.fake_multi_node.node_provider."
                              "FakeMultiNodeProvider",
                    "disable_node_updaters": True, "disable_launch_config_check": True,
                    "gcs_address": self.address, "launch_multiple": True,
                    "head_node_id": HEAD_ID}
        config = {"cluster_name": "feedline-fake", "max_workers": 3, "provider": provider,
                  "available_node_types": {**NODE_TYPES, "ray.head.default": {
                      "resources": {"CPU": 0}, "node_config": {}, "max_workers": 0}},
                  "head_node_type": "ray.head.default", "auth": {}, "upscaling_speed": 1.0,
                  "idle_timeout_minutes": 0.05, "docker": {}, "file_mounts": {},
                  "cluster_synced_files": [], "file_mounts_sync_continuously": False,
                  "rsync_exclude": [], "rsync_filter": [], "initialization_commands": [],
                  "setup_commands": [], "head_setup_commands": [], "worker_setup_commands": [],
                  "head_start_ray_commands": [], "worker_start_ray_commands": []}
        path = self.temp / "autoscaling.json"
        path.write_text(json.dumps(config))
        env = dict(os.environ, AUTOSCALER_UPDATE_INTERVAL_S="1", RAY_FAKE_CLUSTER="1",
                   RAY_enable_autoscaler_v2="1", RAY_CLOUD_INSTANCE_ID=HEAD_ID,
                   RAY_OVERRIDE_NODE_ID_FOR_TESTING=HEAD_ID)
        ray_bin = str(Path(sys.executable).with_name("ray"))
        with open(self.temp / "ray_start.log", "w") as log:
            proc = subprocess.Popen(
                [ray_bin, "start", "--head", f"--autoscaling-config={path}",
                 f"--port={self.port}", "--node-ip-address=127.0.0.1",
                 f"--ray-client-server-port={_free_port()}", f"--temp-dir={self.temp}",
                 "--include-dashboard=false", "--disable-usage-stats", "--num-cpus=0",
                 f"--object-store-memory={STORE}"],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.sid = proc.pid  # the fake nodes start in this session too
        if proc.wait(timeout=120) != 0:
            raise RuntimeError((self.temp / "ray_start.log").read_text()[-3000:])

    def shutdown(self) -> None:
        # gcs_server and the fake raylets ignore SIGTERM for seconds once the head goes down
        for sig, grace in ((signal.SIGTERM, 0.5), (signal.SIGKILL, 2.0)):
            for pid in _session_pids(self.sid) if self.sid else []:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            end = time.time() + grace
            while self.sid and time.time() < end and _session_pids(self.sid):
                time.sleep(0.1)
        shutil.rmtree(self.temp, ignore_errors=True)


def nodes(resource: str) -> list[str]:
    return [n["NodeID"] for n in ray.nodes() if n["Alive"] and resource in n["Resources"]]


def requested() -> list:
    """The request Ray's autoscaler holds now, read back from the GCS (autoscaler v2)."""
    from ray.autoscaler.v2.sdk import get_cluster_resource_state
    from ray.experimental.internal_kv import internal_kv_get_gcs_client

    state = get_cluster_resource_state(internal_kv_get_gcs_client())
    return [[dict(r.request.resources_bundle), r.count]
            for c in state.cluster_resource_constraints for r in c.resource_requests]


def wait_for(condition, timeout: float = 90.0):
    end = time.time() + timeout
    while time.time() < end:
        if value := condition():
            return value
        time.sleep(0.5)
    raise TimeoutError(f"not within {timeout:g} s")


def feed(pool: PoolController, *, wait: float, busy: float, seconds: float) -> None:
    """Pulses shaped as a run sends them (pipeline.train.observers, pipeline.data.udf.reader): every
    second, each of two ranks' wait over its steps and the decode actors' busy time."""
    end = time.time() + seconds
    while time.time() < end:
        now = time.time()
        for rank in (0, 1):
            pool.observe(RankWait(rank=rank, wait_s=wait * 1.0, step_s=1.0, steps=5, t=now))
        for actor in range(pool.size):
            pool.observe(DecodeBusy(actor=f"a{actor}", busy_s=busy, t=now))
        pool.tick(now)
        time.sleep(1.0)


def main(work: str) -> None:
    cluster = FakeCluster()
    out: dict = {}
    try:
        cluster.start()
        ray.init(address=cluster.address, logging_level="WARNING")
        from ray.autoscaler.v2.utils import is_autoscaler_v2

        is_autoscaler_v2(fetch_from_server=True)  # request_resources caches v1/v2 per process
        config = load_config(ROOT / "examples" / "quickstart.yaml", [
            "data.concurrency=[1, 4]", "data.autoscale_cooldown_s=2",
            "data.placement.resources={feedline_preprocess: 0.001}"]).data
        board = RunInbox.remote()
        pool = PoolController(config, board, run="fake", metrics_path=Path(work) / "m.jsonl",
                              console=Console(stderr=True))
        out["before"] = {"preprocess": nodes("feedline_preprocess"),
                         "train": nodes("feedline_train")}
        # starving: the pool grows past the cluster's CPUs (none), the controller asks
        feed(pool, wait=0.8, busy=0.95, seconds=10)  # a settled window, then growth
        out["request"] = requested()
        started = time.time()
        wait_for(lambda: nodes("feedline_preprocess"))
        out["node_after_s"] = time.time() - started

        @ray.remote(num_cpus=1, resources={"feedline_preprocess": 0.001})
        def where():
            return ray.get_runtime_context().get_node_id()

        out["decode_node"] = ray.get(where.remote(), timeout=60)
        out["preprocess"] = nodes("feedline_preprocess")
        out["train_during"] = nodes("feedline_train")
        feed(pool, wait=0.5, busy=0.95, seconds=3)  # still waiting: the request stands
        out["limit"] = ray.get(board.pool_cpus.remote())
        out["request_while_waiting"] = requested()
        feed(pool, wait=0.0, busy=0.5, seconds=6)  # fed (a whole window): withdrawn
        out["request_after"] = requested()
        wait_for(lambda: not nodes("feedline_preprocess"))
        out["removed"] = True
        out["decisions"] = pool.decisions
        out["train_ever"] = nodes("feedline_train")
        print("FEEDLINE-RESULT " + json.dumps(out))
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
