"""The driver's side of one run: plan → datasets → ``TorchTrainer`` → outputs.

- :mod:`.runner`: ``run_job`` (planning, the trainer, ``summary.json``); :mod:`.network`: the
  NCCL advice per node and rank; :mod:`.outputs`: the profile, diagnosis and report.
- :mod:`.inbox`: ``RunInbox``, the actor the Train workers push their records into;
  :mod:`.progress`: the console's progress and the per-epoch records drained from it.
- :mod:`.breakdown`: where the wall time went, process start to exit;
  :mod:`.delivered`: every rank's sample ids per epoch (``delivered.npz``).
- :mod:`.abortable`: a ``TorchTrainer`` a signal can stop; :mod:`.split`: how the datasets
  are split among the Train workers (a ``ray`` source's validation unevenly: every row
  scored; the ranks read a file source's validation themselves).

What runs inside a Train worker is :mod:`pipeline.train`.
"""
