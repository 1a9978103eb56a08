"""The package layout of ``../shared/DESIGN.md``: imports point down only, no stage imports the
benchmarks, and the Train worker's stages that must run without Ray do not import it."""

import ast
import subprocess
import sys
from pathlib import Path

PIPELINE = Path(__file__).resolve().parents[2] / "pipeline"

#: lower levels first; a package imports only from lower levels (or the sibling pairs below)
LEVELS = [
    {"errors"},
    {"config", "procfs", "jsonio", "messages"},
    {"transfer", "collective", "profile"},
    {"data", "train"},
    {"cluster"},
    {"pool"},
    {"job"},
    {"api"},
    {"feed", "tune", "bench", "workloads"},
    {"cli"},
    {"__main__"},
]
LEVEL = {name: i for i, names in enumerate(LEVELS) for name in names}
#: sideways imports that are part of the design: the worker's loop reads the decoded-sample
#: cache; the link probe times itself with the profiler's clock
SIBLINGS = {("train", "data"), ("collective", "profile")}


def imports(path: Path) -> list[str]:
    """The ``pipeline.*`` modules a file imports (lazy imports inside functions included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "pipeline":
                found += [f"pipeline.{a.name}" for a in node.names]
            elif node.module.startswith("pipeline."):
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("pipeline.")]
    return found


def package(path: Path) -> str:
    return path.relative_to(PIPELINE).parts[0].removesuffix(".py")


def test_every_package_has_a_level():
    names = {package(p) for p in PIPELINE.rglob("*.py")} - {"__init__"}
    assert names <= set(LEVEL), f"give {sorted(names - set(LEVEL))} a level in LEVELS"


def test_imports_point_down_only():
    wrong = []
    for path in sorted(PIPELINE.rglob("*.py")):
        mine = package(path)
        if mine == "__init__":
            continue
        for module in imports(path):
            theirs = module.split(".")[1]
            if theirs == mine or (mine, theirs) in SIBLINGS:
                continue
            # config composes the sections each stage declares in its own `config` module
            if mine == "config" and module.split(".")[2:3] == ["config"]:
                continue
            if LEVEL[theirs] >= LEVEL[mine]:
                wrong.append(f"{path.relative_to(PIPELINE.parent)} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_no_stage_imports_the_benchmarks():
    users = {package(p) for p in PIPELINE.rglob("*.py")
             if any(m.startswith("pipeline.bench") for m in imports(p))}
    assert users <= {"bench", "cli"}, users


def test_transfer_and_collective_core_do_not_import_ray():
    for stage in ("transfer", "collective"):
        for path in (PIPELINE / stage).rglob("*.py"):
            if path.name == "on_ray.py":  # collective.on_ray: the one lazy Ray shell
                continue
            tree = ast.parse(path.read_text())
            names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
            names += [n.module for n in ast.walk(tree)
                      if isinstance(n, ast.ImportFrom) and n.module]
            assert not [n for n in names if n == "ray" or n.startswith("ray.")], path


#: what Ray's own processes load: Ray Data's decode actors and tasks (the UDFs, the epoch
#: order, the numbering actor), its split coordinator (the pool's live limit), Ray Train's
#: controller and dataset manager (the backend config, the split config) and the run's inbox
RAY_SIDE = ("pipeline.data.udf.reader", "pipeline.data.udf.read_images",
            "pipeline.data.udf.read_tables", "pipeline.data.udf.bad_samples",
            "pipeline.data.dataset", "pipeline.data.sources.ray_dataset",
            "pipeline.pool.live_limits", "pipeline.job.split", "pipeline.job.torch_backend",
            "pipeline.job.inbox")


#: what ``pipeline run``'s driver loads from its start to its exit (the built-in task included)
DRIVER = ("pipeline.cli.main", "pipeline.api", "pipeline.job.runner", "pipeline.job.abortable",
          "pipeline.train.spec", "pipeline.collective.on_ray", "pipeline.job.outputs")


def torch_loaded_by(modules: tuple[str, ...], then: str = "") -> str:
    code = (f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n{then}\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=PIPELINE.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()[:500]


def test_what_rays_own_processes_load_imports_no_torch():
    """Every decode actor that imported torch paid 1.4 s of CPU at each start (every streamed
    epoch), and Ray Train's controller 2.1 s before its first worker: none of them needs it."""
    assert torch_loaded_by(RAY_SIDE) == "[]"


def test_the_driver_imports_no_torch():
    """torch is 1.2 s of the driver's start on 2 cores; only the Train workers train."""
    then = ("from pipeline.train.task import resolve_task, task_name\n"
            "assert task_name(resolve_task('classification')) == 'classification'")
    assert torch_loaded_by(DRIVER, then) == "[]"
