"""DeviceFeeder on the CPU passes the shared iterator contract, at the depths people use."""

from pipeline.transfer import DeviceFeeder
from tests.unit.iterator_contract import IteratorContract


class TestDeviceFeederContract(IteratorContract):
    where_hint = "raised in the producer thread while reading batch 3 from the source"

    def build(self, source):
        return DeviceFeeder(source, device="cpu", depth=2)


class TestDeviceFeederDepthOneContract(IteratorContract):
    where_hint = "raised in the producer thread while reading batch 3 from the source"

    def build(self, source):
        return DeviceFeeder(source, device="cpu", depth=1, min_pin_bytes=0)


class TestDeviceFeederNextProtocolContract(IteratorContract):
    """Driving the feeder with ``next(feeder)`` instead of a for-loop keeps the contract."""

    where_hint = "feedline-transfer"

    def build(self, source):
        feeder = DeviceFeeder(source, device="cpu", depth=3)
        return _NextDriven(feeder)


class _NextDriven:
    def __init__(self, feeder):
        self._feeder = feeder

    def __iter__(self):
        feeder = self._feeder
        self._feeder = None  # the generator below is the only owner, as in user code
        while True:
            try:
                yield next(feeder)
            except StopIteration:
                return
