"""Which device a Train worker feeds, decided once and with the reason recorded.

Runs in the Train worker (or any torch loop). Nothing here runs at import time: the probe happens
when :func:`detect_device` is called, which :class:`~pipeline.transfer.feeder.DeviceFeeder` does
when iteration starts, never in a constructor. The transfer stage moves data to ``cuda`` or keeps
it on ``cpu``; other device types are refused with a remedy rather than half-supported.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch

logger = logging.getLogger(__name__)

_SUPPORTED = ("cpu", "cuda")


@dataclass(frozen=True)
class DeviceChoice:
    """The device batches go to and why it was picked (shown in run summaries and ``doctor``)."""

    device: torch.device
    reason: str


def detect_device(prefer: str | torch.device | DeviceChoice = "auto") -> DeviceChoice:
    """Resolve ``prefer`` ("auto", "cpu", "cuda", "cuda:N" or a ``torch.device``) to a device.

    "auto" picks the current CUDA device when one is visible, else the CPU, and says why.
    Asking for CUDA where none is visible is an error, not a silent fallback: a Ray Train worker
    that was promised a GPU and lacks one is misconfigured.
    """
    if isinstance(prefer, DeviceChoice):
        return prefer
    if isinstance(prefer, str) and prefer.strip().lower() == "auto":
        if torch.cuda.is_available():
            return _cuda_choice(torch.device("cuda", torch.cuda.current_device()), "auto")
        return DeviceChoice(torch.device("cpu"), f"cpu: {_why_no_cuda()}")
    try:
        device = torch.device(prefer)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(
            f"device ({prefer!r}) is not a device name; use 'auto', 'cpu', 'cuda' or 'cuda:N'"
        ) from exc
    if device.type not in _SUPPORTED:
        raise ValueError(
            f"device ({prefer!r}) is not supported by the transfer stage; use 'auto', 'cpu' or "
            "'cuda[:N]'")
    if device.type == "cpu":
        return DeviceChoice(device, "cpu: requested")
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"device ({prefer!r}) was requested but {_why_no_cuda()}; use device='auto' to fall "
            "back to the CPU, or fix the worker's GPU resources")
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    count = torch.cuda.device_count()
    if device.index >= count:
        raise ValueError(
            f"device ({prefer!r}) does not exist: {count} CUDA device(s) visible; use cuda:0.."
            f"cuda:{count - 1}")
    return _cuda_choice(device, "requested")


def _cuda_choice(device: torch.device, how: str) -> DeviceChoice:
    count = torch.cuda.device_count()
    name = torch.cuda.get_device_name(device)
    plural = "device" if count == 1 else "devices"
    return DeviceChoice(device, f"cuda: {name}, {count} {plural} ({how}, using {device})")


def _why_no_cuda() -> str:
    if torch.version.cuda is None:
        return "torch built without CUDA"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return f"no CUDA device visible (CUDA_VISIBLE_DEVICES={visible!r})"
    return "no CUDA device visible (driver missing or no GPU)"
