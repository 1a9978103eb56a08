"""Transfer stage: host batches → device, with one host copy, pinned reusable staging and
asynchronous copies that overlap compute. Runs in any torch loop; never imports Ray."""

from pipeline.transfer.config import TransferConfig
from pipeline.transfer.device import DeviceChoice, detect_device
from pipeline.transfer.feeder import DeviceFeeder
from pipeline.transfer.stats import TransferStats

__all__ = ["DeviceChoice", "DeviceFeeder", "TransferConfig", "TransferStats", "detect_device"]
