"""A CPU limit for a running Ray Data execution that the driver can move (``data.autoscale``).

Ray Train hands each dataset's ``ExecutionOptions`` to the ``SplitCoordinator`` actor that runs
the execution, as a copy: nothing on the driver can reach it afterwards. What Ray Data 2.60 does
read again and again is ``options.resource_limits``: its ``ResourceManager`` refreshes the global
limits every second (``GLOBAL_LIMITS_UPDATE_INTERVAL_S``, there for cluster autoscaling), and
submits a decode task only while the task's CPUs fit the budget those limits leave.
:class:`LiveLimits` is those options with a CPU limit read from an actor the driver's
controller sets (:class:`~pipeline.job.inbox.RunInbox`), fetched by a thread every
:data:`POLL_S` in whichever process executes the dataset: the limit is the number of decode
tasks that run at once, moved within a running execution, both ways.

Measured in Ray 2.60 (``tests/integration/test_elastic.py``):

- raising the limit from 1 to 4 CPUs (tasks of 1 CPU) runs 4 tasks at once within a few seconds;
  lowering it back runs one at a time again once the running ones end;
- decode actors (the pool before, ``ActorPoolStrategy``) grew the same way, but a lower limit
  never shrank a running pool (Ray Data removes only idle actors), and every execution (every
  streamed epoch) started new ones.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ray.data import ExecutionOptions, ExecutionResources

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
