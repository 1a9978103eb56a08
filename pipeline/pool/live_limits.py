"""A CPU limit for a running Ray Data execution that the driver can move (``data.autoscale``).

Ray Train hands each dataset's ``ExecutionOptions`` to the ``SplitCoordinator`` actor that runs
the execution, as a copy: nothing on the driver can reach it afterwards. What Ray Data 2.60 does
read again and again is ``options.resource_limits``: its ``ResourceManager`` refreshes the global
limits every second (``GLOBAL_LIMITS_UPDATE_INTERVAL_S``, there for cluster autoscaling), and its
actor autoscaler adds actors only within the budget those limits leave. :class:`LiveLimits` is
those options with a CPU limit read from an actor the driver's controller sets
(:class:`~pipeline.job.inbox.RunInbox`), fetched by a thread every :data:`POLL_S` in whichever
process executes the dataset, so Ray Data's own actor autoscaler does the resizing; and
:class:`LivePool` is an ``ActorPoolStrategy`` whose initial size is that limit's actors, read when
Ray Data plans the next execution (every streamed epoch), so an epoch starts with the pool the
last one ended with instead of ``data.concurrency``'s min.

Measured in Ray 2.60 (``tests/integration/test_elastic.py``; a 500-block pool of 50 ms per row
read first fast, then slowly; ``tests/integration/multinode_run.py``):

- raising the limit grows a running pool: 1 → 4 actors about 3 s after the limit moves;
- lowering it does not shrink a running pool: Ray Data removes only idle actors, and neither
  the lower budget nor back-pressure left one idle for 40 s. A smaller pool starts with the next
  execution (the next streamed epoch);
- without :class:`LivePool` every execution started at one actor and Ray Data took 10-15 s to
  grow it to the limit (4 preprocessing CPUs, 2 trainers): most of a short epoch.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from ray.data import ActorPoolStrategy, ExecutionOptions, ExecutionResources

logger = logging.getLogger(__name__)

POLL_S = 0.5

_limits: dict[Any, float] = {}  # actor id → the last CPU limit read in this process
_pollers: dict[Any, threading.Thread] = {}
_lock = threading.Lock()


def _read(board: Any, key: Any) -> bool:
    """Read the limit into ``_limits``; False once the run is over (the controller closed the
    board, or it is gone): the poller then drops its handle, so the board can go too."""
    import ray

    try:
        limit = float(ray.get(board.pool_cpus.remote(), timeout=5))
    except ray.exceptions.RayActorError:
        return False
    except Exception as exc:  # the driver is busy: keep the last limit
        logger.debug("pool limit not read: %s", exc)
        return True
    if limit < 0:  # CLOSED
        return False
    _limits[key] = limit
    return True


def _poll(board: Any, key: Any) -> None:
    while _read(board, key):
        time.sleep(POLL_S)


def current_limit(board: Any) -> float | None:
    """The CPU limit the controller last set, as seen in this process (None: not readable).
    The first call reads it before returning, so an execution never starts unlimited."""
    key = board._actor_id
    with _lock:
        if key not in _pollers:
            _read(board, key)
            _pollers[key] = threading.Thread(target=_poll, args=(board, key), daemon=True,
                                             name="feedline-pool-limit")
            _pollers[key].start()
    return _limits.get(key)


class LiveLimits(ExecutionOptions):
    """``ExecutionOptions`` whose CPU limit is the smaller of the one given and the one the
    driver's controller sets on ``board`` (an actor with ``pool_cpus() -> float``)."""

    def __init__(self, *, board: Any, **options: Any):
        super().__init__(**options)
        self.board = board

    @property
    def resource_limits(self) -> ExecutionResources:
        limits = self._resource_limits
        live = current_limit(self.board) if getattr(self, "board", None) is not None else None
        return limits if live is None else limits.copy(cpu=min(limits.cpu, live))

    @resource_limits.setter
    def resource_limits(self, value: ExecutionResources) -> None:
        ExecutionOptions.resource_limits.fset(self, value)


class LivePool(ActorPoolStrategy):
    """``ActorPoolStrategy(min_size, max_size)`` whose ``initial_size`` is the number of actors
    the controller's CPU limit on ``board`` holds (within min and max)."""

    def __init__(self, *, board: Any, cpus_per_actor: float, min_size: int, max_size: int):
        self.board, self.cpus_per_actor = board, cpus_per_actor
        super().__init__(min_size=min_size, max_size=max_size)

    @property
    def initial_size(self) -> int:
        current_limit(self.board)  # starts the poller here, once
        _read(self.board, self.board._actor_id)  # planning a new execution: the limit now
        live = _limits.get(self.board._actor_id)
        if live is None or math.isinf(live):  # no limit set yet
            return self._initial_size
        return int(min(self.max_size, max(self.min_size, live // self.cpus_per_actor)))

    @initial_size.setter
    def initial_size(self, value: int) -> None:
        self._initial_size = value
