"""The driver's hold on Ray: connecting (join a cluster, embed in the caller's Ray, or start a
local one with a watchdog that takes it along if the driver dies), stopping on signals, and
planning the CPUs and GPUs between preprocessing and training so neither starves.

- :mod:`.session`: ``ray_session`` (connect, time out, shut down only what it started) and where
  Ray's driver logs go; :mod:`.watchdog`: the local Ray's watchdog process.
- :mod:`.stop`: Ctrl-C / SIGTERM into a clean, resumable stop.
- :mod:`.planner`: ``plan_resources`` and ``PlanError``.
"""
