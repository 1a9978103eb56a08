"""DeviceFeeder behaviour beyond the shared contract: pool reuse, measured copies, stats,
uint8 normalisation, the stall watchdog and argument errors (CPU device)."""

import threading
import tracemalloc
import weakref

import numpy as np
import pytest
import torch

from pipeline.transfer import DeviceFeeder, TransferConfig, TransferStats
from pipeline.transfer.rows import Rows


def _small(i):
    return {"x": np.full((8, 4), i, dtype=np.float32), "y": np.array([i, i + 1], dtype=np.int64)}


@pytest.mark.timeout(60)
def test_steady_state_allocates_nothing_and_copies_once_per_field_over_1000_batches():
    depth = 2
    feeder = DeviceFeeder((_small(i) for i in range(1000)), device="cpu", depth=depth)
    warm = None
    seen = 0
    for i, batch in enumerate(feeder):
        assert int(batch["y"][0]) == i
        seen += 1
        if i == depth + 2:  # every ring slot has been filled at least once by now
            warm = feeder.stats
    end = feeder.stats
    assert seen == 1000
    assert warm.pool_allocations == 2 * (depth + 1), "one buffer per field per ring slot"
    assert end.pool_allocations == warm.pool_allocations, "allocations after warm-up"
    assert end.pool_grows == 0
    # Measured by the counter around each copy call, per field per batch:
    assert end.host_copies / (end.batches * 2) <= 1.0
    assert end.host_copies == 2000 and end.device_copies == 2000
    assert end.host_copy_bytes == end.bytes, "every byte written to staging exactly once"
    assert end.batches == 1000
    assert end.bytes == 1000 * (8 * 4 * 4 + 2 * 8)


@pytest.mark.timeout(30)
def test_no_hidden_numpy_copy_of_the_data():
    # tracemalloc sees every numpy data allocation (torch's allocator is not traced). The
    # feeder's only numpy-visible work is np.copyto into staging, so iterating must not
    # allocate anything near the size of a field, even for non-contiguous read-only input.
    field = np.arange(512 * 1024, dtype=np.float32).reshape(1024, 512)  # 2 MiB
    strided = np.asfortranarray(field)
    strided.flags.writeable = False
    batches = [{"a": field + i, "b": strided} for i in range(6)]
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        out = list(DeviceFeeder(batches, device="cpu", depth=2, copy_threads=2))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(out) == 6 and torch.equal(out[5]["b"], torch.from_numpy(field))
    assert peak - base < field.nbytes // 4, f"a numpy-side copy happened ({peak - base} B)"


@pytest.mark.timeout(30)
def test_rows_of_a_replayed_epoch_are_gathered_straight_into_staging():
    # A replayed batch (pipeline.train.reshuffle.replay) names rows of two ranks' cached
    # columns; the feeder gathers them into its staging slot: the one host copy, no gathered
    # numpy batch between the cache and staging.
    mine = np.arange(4096 * 64, dtype=np.float32).reshape(4096, 64)
    peer = -mine
    picks = [np.sort(np.random.default_rng(i).choice(4096, 1024, replace=False))
             for i in range(8)]
    batches = [{"x": Rows([(mine, p), (peer, p[::2])]), "id": Rows([(p, np.arange(len(p)))])}
               for p in picks]
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        out = list(DeviceFeeder(batches, device="cpu", depth=2))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    field = 1536 * 64 * 4
    assert peak - base < field // 4, f"a numpy-side copy happened ({peak - base} B)"
    for batch, p in zip(out, picks, strict=True):
        assert torch.equal(batch["x"], torch.from_numpy(np.concatenate([mine[p], -mine[p[::2]]])))
        assert batch["id"].tolist() == p.tolist()
    fed = DeviceFeeder(batches, device="cpu")
    list(fed)
    stats = fed.stats
    assert stats.host_copies == 16 and stats.host_copy_bytes == stats.bytes == 8 * (
        field + 1024 * 8)


@pytest.mark.timeout(30)
def test_large_fields_are_copied_in_parallel_chunks_still_once_and_threads_end():
    before = set(threading.enumerate())
    big = np.arange(3 * (1 << 20), dtype=np.float32).reshape(-1, 768)  # 12 MiB
    odd = np.asfortranarray(big[:, :100])  # strided, read-only, 1.2 MiB: one chunk
    odd.flags.writeable = False
    feeder = DeviceFeeder(({"big": big + i, "odd": odd} for i in range(4)), device="cpu",
                          copy_threads=3)
    for i, batch in enumerate(feeder):
        assert torch.equal(batch["big"], torch.from_numpy(big + i))
        assert torch.equal(batch["odd"], torch.from_numpy(np.ascontiguousarray(odd)))
    stats = feeder.stats
    assert stats.host_copies == 8 and stats.host_copy_bytes == stats.bytes == 4 * (
        big.nbytes + odd.nbytes)
    assert not [t.name for t in threading.enumerate() if t not in before and t.is_alive()]


def test_pool_grows_for_a_larger_batch_and_is_counted():
    sizes = [4, 4, 4, 16, 16, 16, 16, 2]
    feeder = DeviceFeeder(({"x": np.arange(n * 1024, dtype=np.float64)} for n in sizes),
                          device="cpu", depth=1)
    out = list(feeder)
    assert [t["x"].numel() for t in out] == [n * 1024 for n in sizes]
    assert all(torch.equal(t["x"], torch.arange(n * 1024, dtype=torch.float64))
               for t, n in zip(out, sizes, strict=True))
    stats = feeder.stats
    assert stats.pool_grows == 2, "each of the 2 ring slots grew once for the 16 KiB batches"
    assert stats.pool_allocations == 4
    assert stats.pool_bytes == 0, "closing released the pool"


def test_stats_record_device_pinning_choice_and_are_a_snapshot():
    feeder = DeviceFeeder([_small(0), _small(1)], device="cpu", pin_memory=True)
    before = feeder.stats
    assert isinstance(before, TransferStats) and before.batches == 0
    list(feeder)
    after = feeder.stats
    assert before.batches == 0, "a snapshot does not change under the caller"
    assert after.batches == 2 and after.pinned is False
    assert "page-locking needs CUDA" in after.pin_reason
    assert after.device.startswith("cpu")
    assert after.consumer_wait_s >= 0 and after.copy_s >= after.host_copy_s >= 0
    assert set(after.as_dict()) >= {"batches", "bytes", "host_copies", "pool_allocations",
                                    "pool_grows", "consumer_wait_s", "copy_s", "pinned",
                                    "pin_reason"}


def test_uint8_normalize_matches_the_formula_bit_for_bit_and_ships_uint8_bytes():
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (2, 3, 5, 5), dtype=np.uint8) for _ in range(4)]
    feeder = DeviceFeeder(({"image": im, "label": np.arange(2)} for im in images),
                          device="cpu", uint8_normalize={"image": (mean, std)})
    out = list(feeder)
    m = torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1)
    for im, batch in zip(images, out, strict=True):
        expected = (torch.from_numpy(im).to(torch.float32) / 255 - m) / s
        assert batch["image"].dtype == torch.float32
        assert torch.equal(batch["image"], expected)
        assert torch.equal(batch["label"], torch.arange(2))
    assert feeder.stats.bytes == 4 * (im.nbytes + 16), "uint8 bytes crossed, not float32"


@pytest.mark.parametrize(("image", "error", "text"), [
    (np.zeros((2, 3, 4, 4), np.float32), TypeError, "field is float32, expected uint8"),
    (np.zeros((2, 4, 4, 3), np.uint8), ValueError, "expected N×C×H×W with C=3"),
])
def test_uint8_normalize_rejects_a_mismatched_field_with_its_name(image, error, text):
    spec = {"image": ((0.5,) * 3, (0.5,) * 3)}
    with pytest.raises(error, match=text) as info:
        list(DeviceFeeder([{"image": image}], device="cpu", uint8_normalize=spec))
    assert "copying field 'image' of batch 0 into staging" in str(info.value.__notes__)


def test_uint8_normalize_names_a_missing_field():
    with pytest.raises(KeyError, match=r"\['img'\] but batch 0 has array fields \['image'\]"):
        list(DeviceFeeder([{"image": np.zeros((1, 3, 2, 2), np.uint8)}], device="cpu",
                          uint8_normalize={"img": ((0.5,) * 3, (0.5,) * 3)}))


@pytest.mark.parametrize(("spec", "text"), [
    ({"image": ((0.5, 0.5), (0.5,))}, "mean has 2 values and std 1"),
    ({"image": ((0.5,), (0.0,))}, "must be finite and non-zero"),
    ({"image": 3}, "must be \\(mean_per_channel, std_per_channel\\)"),
])
def test_uint8_normalize_spec_is_checked_at_construction(spec, text):
    with pytest.raises(ValueError, match=text):
        DeviceFeeder([], device="cpu", uint8_normalize=spec)


@pytest.mark.timeout(30)
def test_stalled_source_raises_a_clear_timeout_in_the_consumer():
    release = threading.Event()

    def stalls_after_one():
        yield _small(0)
        release.wait(timeout=20)  # bounded so the producer thread always exits
        yield _small(1)

    before = set(threading.enumerate())
    feeder = DeviceFeeder(stalls_after_one(), device="cpu", timeout_s=0.3)
    it = iter(feeder)
    assert int(next(it)["y"][0]) == 0
    try:
        with pytest.raises(TimeoutError, match="while the producer was reading batch 1 from "
                                               "the source.*raise timeout_s"):
            next(it)
    finally:
        release.set()
    # The thread was left to finish its call into the source; once that returns it exits.
    for thread in set(threading.enumerate()) - before:
        thread.join(timeout=10)
        assert not thread.is_alive()


@pytest.mark.parametrize(("kwargs", "error", "text"), [
    ({"depth": 0}, ValueError, r"depth \(0\) must be an int >= 1; use 1 to disable overlap"),
    ({"pin_memory": "yes"}, ValueError, r"pin_memory \('yes'\) must be True, False or 'auto'"),
    ({"min_pin_bytes": -1}, ValueError, r"min_pin_bytes \(-1\) must be an int >= 0"),
    ({"timeout_s": 0}, ValueError, r"timeout_s \(0\) must be > 0"),
    ({"copy_threads": -2}, ValueError, r"copy_threads \(-2\) must be an int >= 0"),
])
def test_bad_arguments_name_the_field_value_and_remedy(kwargs, error, text):
    with pytest.raises(error, match=text):
        DeviceFeeder([], **kwargs)


def test_constructor_does_not_resolve_the_device_iteration_does():
    feeder = DeviceFeeder([_small(0)], device="cuda")  # fine to build anywhere
    assert feeder.device is None
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the CPU-only failure path cannot be shown")
    with pytest.raises(RuntimeError, match="use device='auto' to fall back to the CPU"):
        next(iter(feeder))


def test_from_config_maps_fields_and_checks_ship_uint8():
    config = TransferConfig(gpu_prefetch=3, pin_memory=False, ship_uint8=True, min_pin_bytes=0)
    spec = {"image": ((0.5,) * 3, (0.5,) * 3)}
    images = [{"image": np.full((1, 3, 2, 2), 255, np.uint8)}]
    out = list(DeviceFeeder.from_config(images, config, device="cpu", uint8_normalize=spec))
    assert torch.equal(out[0]["image"], torch.ones(1, 3, 2, 2))
    with pytest.raises(ValueError, match="transfer.ship_uint8 \\(true\\) needs uint8_normalize"):
        DeviceFeeder.from_config([], config)
    with pytest.raises(ValueError, match="transfer.ship_uint8 is false"):
        DeviceFeeder.from_config([], TransferConfig(ship_uint8=False),
                                  uint8_normalize=spec)


def test_single_pass_context_manager_and_close_release_the_thread():
    before = set(threading.enumerate())
    with DeviceFeeder((_small(i) for i in range(100)), device="cpu") as feeder:
        it = iter(feeder)
        next(it)
    assert not [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert feeder.stats.pool_bytes == 0
    with pytest.raises(RuntimeError, match="single-pass"):
        iter(feeder)


def test_cpu_tensors_and_pass_through_leaves():
    batch = {"t": torch.arange(6, dtype=torch.bfloat16).view(2, 3), "ids": ["a", "b"],
             "step": 3}
    (out,) = list(DeviceFeeder([batch], device="cpu"))
    assert torch.equal(out["t"], batch["t"]) and out["t"].dtype == torch.bfloat16
    assert out["t"].data_ptr() != batch["t"].data_ptr()
    assert out["ids"] == ["a", "b"] and out["step"] == 3


@pytest.mark.timeout(30)
def test_a_handed_over_batch_is_freed_in_the_consumer_thread():
    # The producer keeps no reference to a batch it handed over, so the batch dies in the
    # consumer's thread (what makes record_stream on a per-thread default stream correct on
    # CUDA). The source blocks after batch 0: the producer waits in next() with batch 0 done.
    asked, release = threading.Event(), threading.Event()

    def source():
        yield {"x": np.zeros(1024, np.float32)}
        asked.set()
        release.wait(10)
        yield {"x": np.ones(1024, np.float32)}

    died_in = []
    with DeviceFeeder(source(), device="cpu", depth=1) as feeder:
        it = iter(feeder)
        batch = next(it)
        weakref.finalize(batch["x"], lambda: died_in.append(threading.current_thread().name))
        del batch
        assert asked.wait(10)  # the producer is in the source's next() now
        release.set()
        assert float(next(it)["x"][0]) == 1.0
    assert died_in == [threading.main_thread().name]
