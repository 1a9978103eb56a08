"""cluster.yaml and examples/cluster-local.yaml: Ray accepts them, and their nodes come up with
the labels and fallback resources that ``data.placement`` / ``train.placement`` select.

Validation runs Ray 2.60's own code: ``prepare_config`` + ``validate_config`` (what ``ray up``
does before the cloud bootstrap, which for AWS needs boto3 and credentials), and for the local
provider the whole ``_bootstrap_config`` of ``ray up``. The start commands are executed in bash
exactly as the launcher composes them (head IP, RAY_OVERRIDE_* environment), with stand-ins for
``ray`` and ``nvidia-smi`` on PATH; every recorded ``ray start`` is parsed by Ray's own CLI
definition, so a misspelt flag fails here rather than on a cloud node.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("ray")
jsonschema = pytest.importorskip("jsonschema")

import ray  # noqa: E402
from ray._private.label_utils import parse_node_labels_string, validate_node_label_syntax  # noqa: E402
from ray.autoscaler._private.command_runner import _with_environment_variables  # noqa: E402
from ray.autoscaler._private.commands import _bootstrap_config  # noqa: E402
from ray.autoscaler._private.util import (  # noqa: E402
    prepare_config,
    validate_config,
    with_head_node_ip,
)
from ray.scripts.scripts import start as ray_start_cli  # noqa: E402

from pipeline.config.placement import PlacementConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster.yaml"
LOCAL = ROOT / "examples" / "cluster-local.yaml"
JOB = ROOT / "examples" / "cluster-job.yaml"
HEAD_IP = "10.0.0.1"

# What a Feedline config puts in data.placement / train.placement for these clusters.
PREPROCESS = {"feedline.io/role": "preprocess"}
TRAIN = {"feedline.io/role": "train"}
PLACEMENTS = {
    "preprocess": [PlacementConfig(labels=PREPROCESS),
                   PlacementConfig(resources={"feedline_preprocess": 0.001})],
    "train": [PlacementConfig(labels=TRAIN), PlacementConfig(resources={"feedline_train": 0.001})],
}

pytestmark = pytest.mark.timeout(60)


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def prepared(path: Path) -> dict:
    """The config as ``ray up`` resolves it, up to the provider's cloud bootstrap."""
    config = load(path)
    if config["provider"]["type"] == "local":
        return _bootstrap_config(config, no_config_cache=True)
    config = prepare_config(config)
    validate_config(config)
    return config


def shell_commands(config: dict) -> list[str]:
    """Every shell command the launcher may run on a node, node-type specific ones included."""
    commands = [c for key, value in config.items() if key.endswith("_commands") for c in value]
    for spec in config["available_node_types"].values():
        commands += spec.get("initialization_commands", [])
    return commands


# ---- ray start, executed as the launcher would ---------------------------------------------

STUB_RAY = """#!{python}
import json, os, sys
with open(os.environ["FEEDLINE_RAY_LOG"], "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "env": {{k: v for k, v in os.environ.items()
                        if k.startswith(("RAY_OVERRIDE_", "RAY_AUTH_"))}}}}) + "\\n")
"""
NVIDIA_SMI = {
    True: "#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'\n",
    False: "#!/bin/sh\necho 'No devices were found'\nexit 6\n",
}


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def run_start_commands(commands: list[str], env_vars: dict, gpu: bool, tmp: Path) -> list[dict]:
    """Run ``commands`` in bash as the launcher would; return each ``ray`` call's argv and env."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    _executable(bin_dir / "ray", STUB_RAY.format(python=sys.executable))
    _executable(bin_dir / "nvidia-smi", NVIDIA_SMI[gpu])
    path = f"{bin_dir}:/usr/bin:/bin"
    # The stand-in must be the `ray` these commands reach: `ray stop` must never hit a real Ray.
    assert shutil.which("ray", path=path) == str(bin_dir / "ray")
    log = tmp / "ray-calls.jsonl"
    env = {"PATH": path, "HOME": str(tmp), "FEEDLINE_RAY_LOG": str(log)}
    for cmd in with_head_node_ip(commands, HEAD_IP):
        if env_vars:
            cmd = _with_environment_variables(cmd, env_vars)
        done = subprocess.run(["bash", "-c", cmd], env=env, capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 0, f"{cmd!r} failed: {done.stderr}"
    return [json.loads(line) for line in log.read_text().splitlines()]


def started_node(calls: list[dict]) -> dict:
    """Parse the single ``ray start`` with Ray's own CLI and resolve labels/resources the way
    Ray does: launcher overrides (RAY_OVERRIDE_*) win over --labels/--resources."""
    starts = [c for c in calls if c["argv"][:1] == ["start"]]
    assert len(starts) == 1, calls
    argv, env = starts[0]["argv"][1:], starts[0]["env"]
    params = ray_start_cli.make_context("ray start", list(argv)).params
    labels = parse_node_labels_string(params["labels"] or "")
    labels.update(json.loads(env.get("RAY_OVERRIDE_LABELS", "{}")))
    resources = json.loads(params["resources"] or "{}")
    for key, flag in (("CPU", "num_cpus"), ("GPU", "num_gpus")):
        if params[flag] is not None:
            resources[key] = params[flag]
    resources.update(json.loads(env.get("RAY_OVERRIDE_RESOURCES", "{}")))
    return {"argv": argv, "params": params, "env": env, "labels": labels,
            "resources": resources}


def launcher_env(config: dict, node_type: str) -> dict:
    """RAY_OVERRIDE_* as Ray's NodeUpdater sets them (never for the local provider)."""
    if config["provider"]["type"] == "local":
        return {}
    spec = config["available_node_types"][node_type]
    env = {}
    if spec.get("resources"):
        env["RAY_OVERRIDE_RESOURCES"] = spec["resources"]
    if spec.get("labels"):
        env["RAY_OVERRIDE_LABELS"] = spec["labels"]
    return env


@pytest.fixture(scope="module")
def aws_nodes(tmp_path_factory) -> dict[str, dict]:
    """cluster.yaml's three node types as they would start."""
    config = prepared(CLUSTER)
    nodes = {}
    for name in config["available_node_types"]:
        is_head = name == config["head_node_type"]
        commands = config["head_start_ray_commands" if is_head else "worker_start_ray_commands"]
        gpu = config["available_node_types"][name]["node_config"]["InstanceType"].startswith("p")
        nodes[name] = started_node(run_start_commands(
            commands, launcher_env(config, name), gpu, tmp_path_factory.mktemp(name)))
    return nodes


@pytest.fixture(scope="module")
def local_nodes(tmp_path_factory) -> dict[str, dict]:
    """cluster-local.yaml's head, a CPU-only worker and a GPU worker as they would start."""
    if os.path.exists("/etc/feedline/role"):
        pytest.skip("/etc/feedline/role on this machine overrides the role a worker detects")
    config = prepared(LOCAL)
    runs = {"head": ("head_start_ray_commands", False),
            "cpu worker": ("worker_start_ray_commands", False),
            "gpu worker": ("worker_start_ray_commands", True)}
    return {name: started_node(run_start_commands(
        config[key], {}, gpu, tmp_path_factory.mktemp(name.replace(" ", "-"))))
        for name, (key, gpu) in runs.items()}


def selected(placement: PlacementConfig, nodes: dict[str, dict]) -> set[str]:
    """Nodes a stage's actors may land on: every label matches and every resource fits."""
    return {name for name, node in nodes.items()
            if all(node["labels"].get(k) == v for k, v in placement.labels.items())
            and all(node["resources"].get(k, 0) >= v for k, v in placement.resources.items())}


# ---- Ray's own validation --------------------------------------------------------------------

@pytest.mark.parametrize("path", [CLUSTER, LOCAL], ids=lambda p: p.name)
def test_rays_cluster_launcher_accepts_the_config(path):
    config = prepared(path)
    assert config["head_node_type"] in config["available_node_types"]


def test_rays_schema_rejects_what_a_user_could_get_wrong():
    """The validation above has teeth: a non-string label or a misspelt key is refused."""
    bad_label = load(CLUSTER)
    bad_label["available_node_types"]["train"]["labels"]["feedline.io/role"] = 1
    typo = load(CLUSTER)
    typo["worker_start_ray_comands"] = typo.pop("worker_start_ray_commands")
    for config in (bad_label, typo):
        with pytest.raises(jsonschema.ValidationError):
            validate_config(prepare_config(copy.deepcopy(config)))


# ---- node types: labels, fallback resources, scaling -----------------------------------------

def test_node_types_declare_the_placement_labels_and_fallback_resources():
    types = load(CLUSTER)["available_node_types"]
    assert types["preprocess"]["labels"] == PREPROCESS
    assert types["train"]["labels"] == TRAIN
    assert "labels" not in types["head"], "the head must not attract preprocessing or training"
    assert types["head"]["resources"].get("CPU") == 0
    assert types["preprocess"]["resources"]["feedline_preprocess"] > 0
    assert types["train"]["resources"]["feedline_train"] > 0
    for spec in types.values():
        validate_node_label_syntax(spec.get("labels", {}))  # Ray's label-key rules


def test_worker_types_scale_independently():
    config = load(CLUSTER)
    workers = {k: v for k, v in config["available_node_types"].items()
               if k != config["head_node_type"]}
    assert set(workers) == {"preprocess", "train"}
    for name, spec in workers.items():
        assert 0 <= spec["min_workers"] <= spec["max_workers"], name
    assert sum(s["max_workers"] for s in workers.values()) <= config["max_workers"]


@pytest.mark.parametrize("stage", ["preprocess", "train"])
def test_aws_nodes_start_where_the_placement_selects(aws_nodes, stage):
    for placement in PLACEMENTS[stage]:
        assert selected(placement, aws_nodes) == {stage}, (placement, aws_nodes[stage]["labels"])


@pytest.mark.parametrize("stage", ["preprocess", "train"])
def test_local_workers_label_themselves_by_gpu(local_nodes, stage):
    worker = {"preprocess": "cpu worker", "train": "gpu worker"}[stage]
    for placement in PLACEMENTS[stage]:
        assert selected(placement, local_nodes) == {worker}, local_nodes[worker]["labels"]
    assert local_nodes[worker]["params"]["address"] == f"{HEAD_IP}:6379"


def test_local_head_takes_no_work(local_nodes):
    head = local_nodes["head"]["params"]
    assert head["head"] and head["num_cpus"] == 0 and head["num_gpus"] == 0
    assert not local_nodes["head"]["labels"]


def test_example_job_config_selects_these_node_types(aws_nodes):
    if not JOB.exists():
        pytest.skip(f"{JOB.relative_to(ROOT)} not written yet")
    from pipeline.config import load_config

    config = load_config(JOB)
    for stage, placement in (("preprocess", config.data.placement),
                             ("train", config.train.placement)):
        assert placement.labels or placement.resources, f"{stage}: placement is empty"
        assert selected(placement, aws_nodes) == {stage}, (stage, placement)


# ---- what is exposed, and the token ----------------------------------------------------------

@pytest.mark.parametrize("nodes", ["aws_nodes", "local_nodes"])
def test_dashboard_listens_on_loopback_only(nodes, request):
    node_set = request.getfixturevalue(nodes)
    heads = [n for n in node_set.values() if n["params"]["head"]]
    assert len(heads) == 1
    # Explicit rather than left to a default: Ray's own example cluster configs use 0.0.0.0.
    assert "--dashboard-host=127.0.0.1" in heads[0]["argv"]
    assert heads[0]["params"]["dashboard_host"] == "127.0.0.1"


@pytest.mark.parametrize("nodes", ["aws_nodes", "local_nodes"])
def test_every_node_requires_the_auth_token(nodes, request):
    for name, node in request.getfixturevalue(nodes).items():
        assert node["env"].get("RAY_AUTH_MODE") == "token", name


@pytest.mark.parametrize("path", [CLUSTER, LOCAL], ids=lambda p: p.name)
def test_the_token_is_copied_to_every_node(path):
    assert load(path)["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"


# ---- setup: Feedline installed, versions pinned to the client's --------------------------------

def readme_torch_pin() -> str:
    return re.search(r"pip install (torch==\S+)", (ROOT / "README.md").read_text()).group(1)


@pytest.mark.parametrize("path", [CLUSTER, LOCAL], ids=lambda p: p.name)
def test_setup_commands_install_feedline_with_the_clients_versions(path):
    config = prepared(path)
    mounted = config["file_mounts"]["~/feedline"]
    assert (ROOT / mounted).resolve() == ROOT, "the repository root is what gets mounted"
    ray_pin = f'"ray[data,train,default]=={ray.__version__}"'
    for role in ("head_setup_commands", "worker_setup_commands"):
        commands = "\n".join(config[role])
        assert re.search(r'pip install .*-e "\$HOME/feedline\[digits\]"', commands), role
        assert ray_pin in commands, f"{role}: the cluster must run the client's Ray"
        assert readme_torch_pin() in commands, f"{role}: torch pin differs from the README"
    for name, spec in config["available_node_types"].items():
        # A node type's own worker_setup_commands replace the shared ones entirely.
        assert "worker_setup_commands" not in spec, f"{name} would skip installing Feedline"


# ---- the GPU node type: RDMA-capable, NCCL left to run time ------------------------------------

def test_train_nodes_get_one_efa_interface_per_network_card():
    node = load(CLUSTER)["available_node_types"]["train"]["node_config"]
    assert node["InstanceType"] == "p5.48xlarge"
    nics = node["NetworkInterfaces"]
    assert sorted(n["NetworkCardIndex"] for n in nics) == list(range(32))
    assert all(n["InterfaceType"] == "efa" for n in nics)
    assert [n["DeviceIndex"] for n in nics if n["NetworkCardIndex"] == 0] == [0]
    # Ray's AWS bootstrap refuses interfaces without subnet/groups, or both levels at once.
    assert all(n["SubnetId"] and n["Groups"] for n in nics)
    assert not {"SubnetId", "SubnetIds", "SecurityGroupIds"} & set(node)


@pytest.mark.parametrize("path", [CLUSTER, LOCAL], ids=lambda p: p.name)
def test_no_nccl_setting_is_hard_coded(path):
    commands = shell_commands(prepared(path))
    assert commands and not [c for c in commands if "NCCL_" in c]


@pytest.mark.parametrize("path", [CLUSTER, LOCAL], ids=lambda p: p.name)
def test_every_command_is_valid_bash(path):
    """YAML folding can break quoting silently; bash -n catches it before a node does."""
    commands = shell_commands(prepared(path))
    for cmd in commands:
        done = subprocess.run(["bash", "-n", "-c", cmd], capture_output=True, text=True,
                              timeout=10)
        assert done.returncode == 0, f"{cmd!r}: {done.stderr}"
