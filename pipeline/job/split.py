"""How the datasets are split among the Train workers (driver side; pickled to Ray Train's
controller, which builds the splits).

The training set is split evenly, as Ray Train does: every rank gets as many rows, so no rank
runs out of batches while its peers wait for it in an all-reduce (the rows that do not divide
by the worker count are left out, and the accounting says which: ``split_remainder``).
Validation has no step in lockstep, and its counts are summed over the ranks: it is split
unevenly, so every validation row is scored. (Only a ``ray`` source's validation set comes
here; the ranks read a file source's themselves, :mod:`pipeline.data.udf.local`.)
"""

from __future__ import annotations

from typing import Any

from ray.train import DataConfig


class EveryValidationRow(DataConfig):
    """Ray Train's ``DataConfig``, with the validation set split unevenly."""

    def configure(self, datasets: dict[str, Any], world_size: int, worker_handles: Any,
                  worker_node_ids: Any, **kwargs: Any) -> list[dict[str, Any]]:
        rest = {name: ds for name, ds in datasets.items() if name != "val"}
        out = (super().configure(rest, world_size, worker_handles, worker_node_ids, **kwargs)
               if rest else [{} for _ in range(world_size)])
        if "val" in datasets:
            ds = datasets["val"].copy(datasets["val"])
            ds.context.execution_options = self._resolve_execution_options("val")
            for rank, split in enumerate(ds.streaming_split(world_size, equal=False)):
                out[rank]["val"] = split
        return out
