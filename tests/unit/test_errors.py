"""A full disk is found wherever it surfaces: the driver's own write, a wrapped one, or a Train
worker's error as Ray's text carries it."""

import errno
import shutil

import pytest

from pipeline.errors import OutputWriteError


def test_a_full_disk_is_found_through_the_chain_and_in_a_workers_text(tmp_path, monkeypatch):
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "m.jsonl"))
        except OSError as exc:
            raise RuntimeError("saving the checkpoint failed") from exc
    except RuntimeError as wrapped:
        found = OutputWriteError.find(wrapped, tmp_path)
    assert found.errno == errno.ENOSPC
    assert str(found).startswith(f"cannot write the run folder {tmp_path} (No space left on "
                                 f"device; ") and "choose another run.output" in str(found)
    worker = RuntimeError("Training failed due to worker errors:\n  OSError: [Errno 28] Error "
                          "writing bytes to file. Detail: [errno 28] No space left on device")
    # a text names no file: it is the run folder's only when the folder's disk is (near) full
    assert OutputWriteError.find(worker, tmp_path) is None  # this machine's /tmp has room
    monkeypatch.setattr("shutil.disk_usage", lambda path: shutil._ntuple_diskusage(10, 10, 0))
    assert OutputWriteError.find(worker, tmp_path).errno == errno.ENOSPC
    # another disk full (Ray spilling objects to /var/tmp): not the run folder's to name
    spill = OSError(errno.ENOSPC, "No space left on device", "/var/tmp/ray/spill/obj")
    assert OutputWriteError.find(spill, tmp_path) is None
    assert OutputWriteError.find(PermissionError(errno.EACCES, "denied"), tmp_path) is None
    assert OutputWriteError.find(ValueError("bad value"), tmp_path) is None


def test_converted_raises_the_full_disk_as_itself_and_lets_the_rest_pass(tmp_path):
    with pytest.raises(OutputWriteError) as info, OutputWriteError.converted(tmp_path):
        raise OSError(errno.EDQUOT, "Disk quota exceeded", str(tmp_path / "summary.json"))
    assert "(Disk quota exceeded;" in str(info.value)
    with pytest.raises(KeyError), OutputWriteError.converted(tmp_path):
        raise KeyError("x")
