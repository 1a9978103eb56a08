"""Process-group backend choice: nccl with GPUs, gloo on CPU, overridable in config. Pure."""

from __future__ import annotations

from pipeline.collective.config import CollectiveConfig


def choose_backend(config: CollectiveConfig, has_gpu: bool) -> tuple[str, str]:
    """``(backend, reason)`` for this worker; the reason goes into the run summary."""
    if config.backend == "auto":
        if has_gpu:
            return "nccl", "auto: CUDA GPUs are present, nccl is the fast GPU backend"
        return "gloo", "auto: no GPU on this worker, gloo runs collectives on the CPU"
    if config.backend == "nccl" and not has_gpu:
        raise ValueError("collective.backend ('nccl') needs CUDA GPUs but this worker has none; "
                         "use 'gloo' or 'auto'")
    if config.backend == "gloo" and has_gpu:
        return "gloo", ("collective.backend = gloo (set in config) although GPUs are present; "
                        "nccl would move GPU gradients much faster")
    return config.backend, f"collective.backend = {config.backend} (set in config)"
