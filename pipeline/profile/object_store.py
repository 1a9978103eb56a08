"""Reading Ray's object store from the driver: bytes in use and bytes spilled so far.

Ray 2.60 has no public call for these; ``ray memory --stats-only`` reads the raylet's store
stats through the internal API used here. Driver only; Ray is imported lazily.
"""

from __future__ import annotations

from collections.abc import Callable


def object_store_reader() -> Callable[[], tuple[int, int]] | None:
    """A function returning (bytes in the object store, bytes spilled so far), or None
    when Ray is not initialised in this process."""
    import ray

    if not ray.is_initialized():
        return None
    from ray._private.internal_api import get_memory_info_reply, get_state_from_address

    state = get_state_from_address(ray.get_runtime_context().gcs_address)

    def read() -> tuple[int, int]:
        stats = get_memory_info_reply(state, timeout_seconds=10.0).store_stats
        return int(stats.object_store_bytes_used), int(stats.spilled_bytes_total)

    return read
