"""Workloads beyond image classification, built on the public task and data-source APIs.

Each is an example a user could have written outside Feedline, kept here so that it is tested
and runnable from YAML. Nothing is imported eagerly: Ray Data workers unpickle
:func:`pipeline.workloads.packing.pack_batch` without loading torch.

- :mod:`pipeline.workloads.lm`: a small causal language model on the standard library's
  docstrings (``examples/lm.yaml``); its parts are :mod:`~pipeline.workloads.corpus` (driver),
  :mod:`~pipeline.workloads.packing` (Ray Data worker) and :mod:`~pipeline.workloads.decoder`
  (Train worker).
"""

__all__: list[str] = []
