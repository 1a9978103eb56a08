"""The iterator contract itself: a correct stage passes, broken stages are caught.

Without this, a contract check that can never fail would pass every stage silently.
"""

import queue
import threading

import numpy as np
import pytest

from tests.unit.iterator_contract import IteratorContract


class TestPassthroughContract(IteratorContract):
    """The trivial correct stage: a generator handing batches through."""

    where_hint = "failing_source"

    def build(self, source):
        return (batch for batch in source)


class _AliasingStage(IteratorContract):
    """Copies each batch into ONE reused buffer per field and yields views of it."""

    def build(self, source):
        buffers = {}

        def gen():
            for batch in source:
                out = {}
                for key, value in batch.items():
                    if isinstance(value, np.ndarray) and value.dtype.kind in "biufc":
                        buf = buffers.setdefault(key, np.empty_like(value))
                        np.copyto(buf, value)
                        out[key] = buf
                    else:
                        out[key] = value
                yield out
        return gen()


class _SwallowingStage(IteratorContract):
    """Stops quietly when the source raises."""

    def build(self, source):
        def gen():
            try:
                yield from source
            except ValueError:
                return
        return gen()


class _LeakyPrefetcher(IteratorContract):
    """A thread prefetcher with no stop event: early break leaves the thread blocked."""

    thread_exit_timeout_s = 0.5

    def build(self, source):
        q = queue.Queue(maxsize=2)
        done = object()

        def work():
            try:
                for batch in source:
                    q.put(batch, timeout=2)  # bounded so the test process never hangs
                q.put(done, timeout=2)
            except queue.Full:
                return

        thread = threading.Thread(target=work, daemon=True)
        thread.start()

        def gen():
            while (item := q.get(timeout=5)) is not done:
                yield item
        return gen()


def test_contract_catches_buffer_aliasing():
    with pytest.raises(AssertionError, match=r"\(held\)"):
        _AliasingStage().test_values_bit_equal_and_stay_valid_after_iteration_moves_on()


def test_contract_catches_swallowed_errors():
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        _SwallowingStage().test_producer_exception_surfaces_with_where_it_happened()


@pytest.mark.timeout(30)
def test_contract_catches_a_thread_left_running():
    with pytest.raises(AssertionError, match="threads still running"):
        _LeakyPrefetcher().test_early_break_frees_thread_and_closes_source()
