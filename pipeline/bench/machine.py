"""What a reader needs to judge a benchmark's numbers: the machine, its load and the versions.

Driver only. Recorded in every result file, so numbers from different machines or busy
spells are never compared blind.
"""

from __future__ import annotations

import os
import platform
import time
from typing import Any


def cores() -> int:
    """CPUs this process may run on (``nproc``): the physical check's budget."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def load_average() -> list[float] | None:
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass  # not Linux: platform.processor() is the best we have
    return platform.processor() or "unknown"


def machine_description(ray_cluster_cpus: float | None = None) -> dict[str, Any]:
    """CPUs, CPU model, RAM, platform, library versions, load average and date."""
    import numpy
    import PIL
    import torch

    ram = None
    if hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    versions = {"torch": torch.__version__, "numpy": numpy.__version__,
                "pillow": PIL.__version__}
    try:
        import ray

        versions = {"ray": ray.__version__, **versions}
    except ImportError:
        pass  # a torch-only machine: the Ray contenders cannot run there anyway
    return {
        "nproc": cores(),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "ram_gib": round(ram, 1) if ram else None,
        "ray_cluster_cpus": ray_cluster_cpus,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
        "load_average": load_average(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }
