"""Where a short job's fixed cost goes, and what each start-up lever of issue 29 changes.

Each round runs ``pipeline run CONFIG`` once per variant, in its own process with its own local
Ray, as a user runs it (variants rotate between rounds, so a slow moment of the machine does not
land on one of them); the headline is the wall time the user waits, process start to exit, and
Feedline's own breakdown says where it went. Medians over the rounds, side by side:

=====================  =========================================================================
baseline               Feedline as it is
startup_concurrency    ``RAY_worker_maximum_startup_concurrency=8``: Ray starts workers at most
                       ``min(cores, num_cpus)`` at a time (2 here); Ray Train starts ~11
no_worker_env          the Train workers get no ``runtime_env`` (Feedline's NCCL/gloo env vars):
                       a worker with a runtime env never reuses a prestarted one (Ray #47212)
torch_in_driver        as before 2026-12-06's change: the driver imports torch (it resolved the
                       built-in task, imported ``TorchTrainer`` and the collective benchmark)
torch_in_controller    as before 2026-12-06's change: Ray's ``TorchConfig`` and the worker spec
                       itself in ``train_loop_config``, so Ray Train's controller imports torch
                       (``pipeline.job.torch_backend``) before it starts a worker
controller_env         as before 2026-12-07's change: Ray Train gives its controller the driver's
                       settings as a runtime env, so it never takes a worker Ray prestarted
job_env                the job has a runtime env (as ``run.allocator=jemalloc`` gives it): the
                       actors inherit it, and none takes a worker Ray prestarted (Ray #47212)
train_helpers          Ray Train's own helper actors back: its ``PlacementGroupCleaner``
                       (``pipeline.job.abortable``) and ``PreemptionWatcher``
                       (``pipeline.cluster.session.local_ray_env``)
=====================  =========================================================================

A patch runs in the driver only. For a change on the workers' side, ``--against DIR`` adds the
variant ``against``: the same run with another checkout first on ``PYTHONPATH`` (a ``git worktree``
of the commit before), which the local Ray's processes inherit. ``--joined`` measures instead
``pipeline.run`` called in this process on a local Ray it started once (after a warm-up run),
as a driver joining a running cluster does. Each run also gives issue 29's two edges: process
start (the call, joined) to the first training step, and the last step to the exit.

Besides the wall time, each run's machine CPU seconds (``/proc/stat``, from the start to a few
seconds after the exit, when Ray has stopped): on a busy machine, CPU is what runs queue for.
``--by-process`` also samples every new process's CPU time (``/proc/PID/stat``, every 0.5 s)
and names it by its title (Ray titles an actor's process ``ray::Class``): which of Ray's,
Ray Train's, Ray Data's and Feedline's processes spent it.

::

    python benchmarks/startup.py --rounds 3 --save
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: how each variant starts ``pipeline run``: extra environment, and code run before the CLI
VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "startup_concurrency": {"env": {"RAY_worker_maximum_startup_concurrency": "8"}},
    "no_worker_env": {"patch": (
        "import pipeline.job.runner as r; t = r._trainer\n"
        "r._trainer = lambda c, p, d, s, env, *a, **k: t(c, p, d, s, {}, *a, **k)\n")},
    "torch_in_driver": {"patch": "import torch  # noqa: F401\n"},
    "torch_in_controller": {"patch": (
        "import ray, pipeline.job.abortable as a\nfrom ray.train.torch import TorchConfig\n"
        "i = a.AbortableTrainer.__init__\n"
        "def init(self, *args, backend_config, train_loop_config, **k):\n"
        "    spec = ray.get(train_loop_config['spec'])  # the controller unpickles it again\n"
        "    i(self, *args, backend_config=TorchConfig(backend=backend_config.backend,\n"
        "      timeout_s=backend_config.timeout_s), train_loop_config=train_loop_config\n"
        "      | {'unpickled': spec}, **k)\n"
        "a.AbortableTrainer.__init__ = init\n")},
    # as before 2026-12-07's change: Ray Train gives its controller a runtime env
    "controller_env": {"patch": (
        "import pipeline.job.abortable as a\n"
        "from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer as D\n"
        "a.AbortableTrainer._initialize_and_run_controller = D._initialize_and_run_controller\n")},
    # the job has a runtime env (as run.allocator=jemalloc gives it): every actor inherits it,
    # so none takes a worker Ray prestarted (those have none, Ray #47212)
    "job_env": {"patch": (
        "import pipeline.cluster.session as s\n"
        "s.allocator_env = lambda a: {'env_vars': {'FEEDLINE_STARTUP_VARIANT': 'job_env'}}\n")},
    # Ray Train's own helper actors back: its PlacementGroupCleaner and PreemptionWatcher
    "train_helpers": {"env": {"RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "1"}, "patch": (
        "import pipeline.job.abortable as a\n"
        "from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer as D\n"
        "a.AbortableTrainer._create_default_callbacks = D._create_default_callbacks\n")},
}
#: the breakdown's rows (``summary.json``), grouped as issue 29 reports them, by prefix
PHASES = {"imports": "imports and config", "ray start": "ray start",
          "driver set-up": "driver set-up", "worker group": "worker group start",
          "worker start-up": "worker process start", "worker set-up": "worker set-up",
          "first batch": "epoch 1 start-up", "training": "epoch ", "teardown": "fit teardown",
          "outputs": "outputs", "ray shutdown": "ray shutdown"}


def group(phase: str) -> str | None:
    return next((name for name, prefix in PHASES.items() if phase.startswith(prefix)), None)


def run_once(variant: str, config: str, sets: list[str], out: Path,
             by_process: bool = False) -> dict[str, Any]:
    spec = VARIANTS[variant]
    code = (spec.get("patch", "") + "import sys\nfrom pipeline.cli.main import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    argv = [sys.executable, "-c", code, "run", config, "--output", str(out)]
    for item in sets:
        argv += ["--set", item]
    env = dict(os.environ, **spec.get("env", {}))
    env.pop("RAY_ADDRESS", None)
    sampler = ProcessCPU() if by_process else None
    cpu_before, start = machine_cpu_s(), time.perf_counter()
    done = subprocess.run(argv, cwd=spec.get("cwd", ROOT), env=env, capture_output=True,
                          text=True, timeout=900)
    wall = time.perf_counter() - start
    time.sleep(SETTLE_S)  # the local Ray's watchdog stops it after the CLI exits: its CPU counts
    cpu = machine_cpu_s() - cpu_before
    processes = {"by_process": sampler.stop()} if sampler else {}
    if done.returncode != 0:
        return {"variant": variant, "ok": False, "wall_s": wall, "error": done.stderr[-2000:]}
    return measured(variant, json.loads((out / "summary.json").read_text()), wall, cpu) | processes


class ProcessCPU:
    """Every process started after this sampler: its CPU seconds (``/proc/PID/stat``, sampled
    every :data:`EVERY_S`: the last sample before it exits), summed by title. Ray titles a
    worker ``ray::IDLE`` until it hosts an actor (``ray::Class``) or runs a task
    (``ray::name``); the first other title a process shows is its own. A process that lives
    less than a sample is missed."""

    def __init__(self) -> None:
        self.before = set(self._pids())
        self.seen: dict[int, tuple[str, float]] = {}  # pid → (title, CPU s) when last sampled
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def _pids() -> list[int]:
        return [int(p) for p in os.listdir("/proc") if p.isdigit()]

    def _run(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        while not self._stop.wait(EVERY_S):
            for pid in self._pids():
                if pid in self.before or pid == os.getpid():
                    continue
                title = self.seen.get(pid, ("?", 0.0))[0]
                try:
                    stat = Path(f"/proc/{pid}/stat").read_text()
                    if title in PENDING:  # a title, once had, is kept (cheaper)
                        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                        title = title_of([a.decode(errors="replace") for a in argv if a])
                except OSError:  # it exited between the listing and the read
                    continue
                if title in PENDING and pid in self.seen:
                    title = self.seen[pid][0]  # an exiting process has no command line left
                fields = stat[stat.rindex(")") + 2:].split()
                self.seen[pid] = (title, (int(fields[11]) + int(fields[12])) / tick)

    def stop(self) -> dict[str, list[float]]:
        """title → [CPU s, processes]."""
        self._stop.set()
        self._thread.join()
        by_title: dict[str, list[float]] = {}
        for title, cpu in self.seen.values():
            got = by_title.setdefault(title, [0.0, 0])
            got[0] += cpu
            got[1] += 1
        return by_title


def title_of(argv: list[str]) -> str:
    """A process's kind from its command line: Ray's worker titles, Ray's own daemons, the
    driver."""
    if not argv:
        return "?"
    if argv[0].startswith("ray::"):
        return argv[0].split()[0].split(".")[0]
    line = " ".join(argv)
    for needle, name in (("default_worker.py", "ray::IDLE"),  # a worker not yet titled
                         ("gcs_server", "ray: gcs_server"), ("/raylet ", "ray: raylet"),
                         ("dashboard/agent.py", "ray: dashboard agent"),
                         ("runtime_env/agent", "ray: runtime env agent"),
                         ("log_monitor.py", "ray: log monitor"),
                         ("autoscaler/_private/monitor.py", "ray: autoscaler monitor"),
                         ("dashboard/dashboard.py", "ray: dashboard"),
                         ("pipeline.cli.main", "driver (pipeline run)"),
                         ("pipeline.cluster", "feedline: local Ray watchdog")):
        if needle in line:
            return name
    return Path(argv[0]).name


def measured(variant: str, summary: dict[str, Any], wall: float, cpu: float) -> dict[str, Any]:
    """A run's numbers from its ``summary.json``: the phases grouped, and the two edges issue
    29 sets targets on: process start to the first training step (the breakdown up to epoch
    1's first batch), and the last step to the process's exit (the wall after the last epoch's
    steady training)."""
    phases = dict.fromkeys(PHASES, 0.0)
    elapsed, first_step, last_step = 0.0, None, None
    for row in summary["breakdown"]:
        elapsed += row["seconds"]
        if group(row["phase"]) is not None:
            phases[group(row["phase"])] += row["seconds"]
        if row["phase"].startswith("epoch 1 start-up"):
            first_step = elapsed
        if row["phase"].endswith("steady training"):
            last_step = elapsed
    return {"variant": variant, "ok": True, "wall_s": wall, "cpu_s": cpu, "phases": phases,
            "first_step_s": first_step,
            "last_step_to_exit_s": None if last_step is None else wall - last_step,
            "samples": summary["samples"]}


def run_joined(config: str, sets: list[str], out: Path) -> dict[str, Any]:
    """``pipeline.run`` in this process, on the Ray it already joined (the call is the wall)."""
    import pipeline

    cpu_before, start = machine_cpu_s(), time.perf_counter()
    try:
        result = pipeline.run(config, show_progress=False, sets=[*sets, f"run.output={out}"])
    except Exception as exc:  # noqa: BLE001 - a failed round is reported, not fatal
        return {"variant": "joined", "ok": False, "wall_s": time.perf_counter() - start,
                "error": repr(exc)}
    wall = time.perf_counter() - start
    return measured("joined", dict(result.summary), wall, machine_cpu_s() - cpu_before)


SETTLE_S = 4.0
EVERY_S = 0.5  # how often --by-process samples (it costs CPU itself: every process's stat)
PENDING = ("?", "ray::IDLE")  # titles a process shows before its own (or after, exiting)


def machine_cpu_s() -> float:
    """CPU seconds every core of the machine has spent busy so far (``/proc/stat``): across a
    run, the CPU the whole job cost (driver, Ray, every actor), on a machine doing nothing else."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    busy = sum(int(v) for i, v in enumerate(fields[:8]) if i not in (3, 4))  # not idle, iowait
    return busy / os.sysconf("SC_CLK_TCK")


def table(runs: list[dict[str, Any]]) -> str:
    variants = list(dict.fromkeys(r["variant"] for r in runs))
    med = {v: [r for r in runs if r["variant"] == v and r["ok"]] for v in variants}
    base = (statistics.median(r["wall_s"] for r in med["baseline"])
            if med.get("baseline") else None)
    lines = ["| | " + " | ".join(variants) + " |", "|---|" + "---|" * len(variants)]
    walls = [statistics.median(r["wall_s"] for r in med[v]) if med[v] else float("nan")
             for v in variants]
    lines.append("| **wall (s), median** | " + " | ".join(f"**{w:.1f}**" for w in walls) + " |")
    for key, label in (("first_step_s", "start to first step"),
                       ("last_step_to_exit_s", "last step to exit")):
        lines.append(f"| {label} (s), median | " + " | ".join(
            f"{statistics.median(r[key] for r in med[v]):.1f}" if med[v] else "-"
            for v in variants) + " |")
    lines.append("| machine CPU (s), median | " + " | ".join(
        f"{statistics.median(r['cpu_s'] for r in med[v]):.1f}" if med[v] else "-"
        for v in variants) + " |")
    if base:
        lines.append("| ratio to baseline | " + " | ".join(f"{base / w:.2f}x" for w in walls)
                     + " |")
    for phase in PHASES:
        cells = [f"{statistics.median(r['phases'][phase] for r in med[v]):.1f}" if med[v]
                 else "-" for v in variants]
        lines.append(f"| {phase} | " + " | ".join(cells) + " |")
    walls_each = {v: ", ".join(f"{r['wall_s']:.1f}" for r in med[v]) for v in variants}
    lines.append("| rounds | " + " | ".join(f"{len(med[v])} ({walls_each[v]})"
                                            for v in variants) + " |")
    return "\n".join(lines + by_process(med, variants))


def by_process(med: dict[str, list[dict[str, Any]]], variants: list[str]) -> list[str]:
    """CPU seconds by process title (``--by-process``), medians over the rounds, most first."""
    runs = [r for v in variants for r in med[v] if "by_process" in r]
    if not runs:
        return []

    def cell(v: str, title: str) -> str:
        got = [r["by_process"].get(title, [0.0, 0]) for r in med[v]]
        return (f"{statistics.median(c for c, _ in got):.1f} "
                f"(x{statistics.median(n for _, n in got):g})")

    most = {t: max(r["by_process"][t][0] for r in runs if t in r["by_process"])
            for r in runs for t in r["by_process"]}
    lines = ["", "CPU seconds by process title, medians over the rounds (xN: processes of "
             "that title in a run)", "", "| process | " + " | ".join(variants) + " |",
             "|---|" + "---|" * len(variants)]
    for title in sorted((t for t in most if most[t] >= 0.1), key=lambda t: -most[t]):
        lines.append(f"| {title} | " + " | ".join(cell(v, title) if med[v] else "-"
                                                   for v in variants) + " |")
    lines.append("| **all** | " + " | ".join(
        f"**{statistics.median(sum(c for c, _ in r['by_process'].values()) for r in med[v]):.1f}**"
        if med[v] else "-" for v in variants) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "examples" / "quickstart.yaml"))
    parser.add_argument("--set", dest="sets", action="append", default=["train.epochs=2"],
                        metavar="KEY=VALUE")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--save", action="store_true",
                        help="write benchmarks/results/startup-DATE[-TAG].{json,md}")
    parser.add_argument("--tag", default="", help="a name for the saved results")
    parser.add_argument("--joined", action="store_true",
                        help="only 'joined': pipeline.run in this process on a local Ray it "
                             "started once (a warm-up run first), as a driver joining a "
                             "running cluster")
    parser.add_argument("--by-process", action="store_true",
                        help="also the CPU seconds of every process the run started, by title")
    parser.add_argument("--against", metavar="DIR",
                        help="a variant 'against': another checkout (e.g. a git worktree)")
    args = parser.parse_args(argv)
    if args.against:
        tree = Path(args.against).resolve()
        VARIANTS["against"] = {"env": {"PYTHONPATH": str(tree)}, "cwd": tree}
        args.variants = [*args.variants, "against"]
    if args.joined:
        return joined(args)
    runs = []
    with tempfile.TemporaryDirectory(prefix="feedline-startup-") as tmp:
        for round_ in range(args.rounds):
            order = args.variants[round_ % len(args.variants):] + \
                args.variants[:round_ % len(args.variants)]
            for variant in order:
                run = run_once(variant, args.config, args.sets,
                               Path(tmp) / f"r{round_}-{variant}", args.by_process)
                runs.append(run | {"round": round_})
                print(f"round {round_ + 1} {variant}: {run['wall_s']:.1f} s"
                      + (f" (first step {run['first_step_s']:.1f} s, last step to exit "
                         f"{run['last_step_to_exit_s']:.1f} s)" if run["ok"]
                         else f" FAILED: {run['error'][-300:]}"), flush=True)
    return report(args, runs, argv)


def joined(args: argparse.Namespace) -> int:
    import ray

    from pipeline.cluster.session import local_ray_env

    os.environ.update(local_ray_env())
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    runs = []
    try:
        with tempfile.TemporaryDirectory(prefix="feedline-startup-") as tmp:
            for round_ in range(args.rounds + 1):  # round 0 warms the cluster up: not counted
                run = run_joined(args.config, args.sets, Path(tmp) / f"r{round_}")
                print(f"round {round_} joined: {run['wall_s']:.1f} s"
                      + (" (warm-up)" if round_ == 0 else ""), flush=True)
                if round_:
                    runs.append(run | {"round": round_ - 1})
    finally:
        ray.shutdown()
    return report(args, runs, None)


def report(args: argparse.Namespace, runs: list[dict[str, Any]], argv: list[str] | None) -> int:
    text = table(runs)
    print(text)
    if args.save:
        day = time.strftime("%Y-%m-%d")
        name = f"startup-{day}" + (f"-{args.tag}" if args.tag else "")
        results = ROOT / "benchmarks" / "results"
        (results / f"{name}.json").write_text(json.dumps(
            {"config": args.config, "sets": args.sets, "rounds": args.rounds, "runs": runs,
             "cores": os.cpu_count()}, indent=2))
        command = "python benchmarks/startup.py " + " ".join(argv or sys.argv[1:])
        how = ("`pipeline.run` in the benchmark's process on a local Ray it started once, "
               "after a warm-up run (the call is the wall: start and exit are the call's), "
               if args.joined else "each variant in its own process with its own local Ray, "
               "rotated over ")
        (results / f"{name}.md").write_text(
            f"# Start-up levers (issue 29), {day}\n\n`{command}` on {os.cpu_count()} cores; "
            f"`pipeline run` of {Path(args.config).name} with {', '.join(args.sets)}, {how}"
            f"{args.rounds} rounds; medians (s).\n\n{text}\n")
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
