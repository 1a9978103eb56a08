"""A small causal language model on the standard library's docstrings: a second workload end to
end, through the same loop as image classification.

::

    driver                   Ray Data CPU workers, a task per file    Train workers (DDP)
    write_corpus (once) ──►  read its docstrings, pack_files     ──►  CausalLM.loss(model, batch)
    ~/.cache/feedline/       rows: tokens [seq_len+1] int64
      stdlib-text/*.parquet        doc    [seq_len+1] int32

In YAML (``examples/lm.yaml``)::

    data:
      source: {kind: ray, function: "pipeline.workloads.lm:datasets", input: tokens,
               args: {seq_len: 128, train_files: 2}}
    train:
      task: "pipeline.workloads.lm:CausalLM"

:func:`datasets` returns ``{"train", "val"}`` split by corpus file (the last ``val_files`` files
are validation), so no document is split between training and validation and
``data.val_fraction`` does not apply. :class:`CausalLM` counts samples as sequences (each of
``seq_len`` targets, fewer after masking), so throughput and progress are in sequences.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.train.context import TaskContext
from pipeline.train.task import Task
from pipeline.workloads.corpus import DEFAULT_PATH, corpus_files, write_corpus
from pipeline.workloads.decoder import Decoder
from pipeline.workloads.packing import VOCAB_SIZE, pack_files


def datasets(path: str = DEFAULT_PATH, *, seq_len: int = 128, num_files: int = 16,
             val_files: int = 1, train_files: int = 0, concurrency: int = 1,
             num_cpus: float = 1.0) -> dict[str, Any]:
    """``{"train": Dataset, "val": Dataset}`` of packed rows ``tokens`` and ``doc`` (driver).

    Writes the corpus under ``path`` if it is missing (``num_files`` parquet files). The last
    ``val_files`` files are validation; training reads the ``train_files`` files before them
    (0: all). Each file is read and packed by one ``map_batches`` task over a dataset of file
    paths, so the rows depend on the corpus alone (not on how ``read_parquet`` would cut files
    into blocks, which depends on sizes and the cluster); a file drops fewer than ``seq_len``
    targets at its end. At most ``concurrency`` tasks run at once with ``num_cpus`` each: one
    task on one CPU suits a 2-core machine whose other core the Train workers hold. The files
    are local paths: on a multi-node cluster ``path`` must be on a shared filesystem."""
    import ray.data

    if val_files < 0 or train_files < 0:
        raise ValueError(f"val_files ({val_files}) and train_files ({train_files}) must be >= 0")
    files = [str(f) for f in corpus_files(write_corpus(path, num_files=num_files))]
    if val_files >= len(files):
        raise ValueError(f"val_files ({val_files}) leaves no training file of the {len(files)} "
                         f"in {path}; lower it")
    train = files[:len(files) - val_files]
    train = train[:train_files] if train_files else train
    splits = {"train": train, "val": files[len(files) - val_files:]}

    def read(paths: list[str]) -> Any:
        # one row per file, one file per task: a file is one packing unit whatever the cluster
        # (read_parquet would cut files into blocks by size and interleave them)
        ds = ray.data.from_items([{"path": p} for p in paths], override_num_blocks=len(paths))
        return ds.map_batches(pack_files, fn_kwargs={"seq_len": seq_len}, batch_size=1,
                              batch_format="numpy", num_cpus=num_cpus,
                              compute=ray.data.TaskPoolStrategy(size=concurrency))

    return {name: read(paths) for name, paths in splits.items() if paths}


class CausalLM(Task):
    """Next-token prediction with :class:`~pipeline.workloads.decoder.Decoder` over packed rows
    (built in every Train worker; the task itself is only its hyperparameters, picklable).

    A batch holds ``tokens`` (N, T+1) and ``doc`` (N, T+1); inputs are ``tokens[:, :-1]``,
    targets ``tokens[:, 1:]``, and a target in another document than its input position is
    masked out (rows without ``doc`` are one document each). The loss is the mean cross-entropy
    over the targets kept, computed in fp32 even under bf16 autocast; validation reports
    ``val_loss`` (nats per target), ``val_perplexity``, ``val_bits_per_token`` (a token is a
    byte or the end of a document) and ``val_tokens``.
    """

    def __init__(self, *, d_model: int = 128, layers: int = 2, heads: int = 4,
                 dropout: float = 0.0, column: str = "tokens"):
        self.d_model, self.layers, self.heads, self.dropout = d_model, layers, heads, dropout
        self.column = column  # the packed ids: data.source.input

    def build_model(self, ctx: TaskContext) -> nn.Module:
        input_shape = ctx.input_shape
        if len(input_shape) != 1 or input_shape[0] < 2:
            raise ValueError(f"{type(self).__qualname__} reads rows of seq_len + 1 token ids; "
                             f"data.source.input has per-row shape {input_shape}: name the "
                             f"'tokens' column of pipeline.workloads.lm:datasets")
        return Decoder(vocab_size=VOCAB_SIZE, max_len=input_shape[0] - 1, d_model=self.d_model,
                       layers=self.layers, heads=self.heads, dropout=self.dropout)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        total, count = self._token_losses(model, batch)
        return total / count.clamp(min=1)

    def eval_counts(self, model: nn.Module,
                    batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        total, count = self._token_losses(model, batch)
        return {"loss_sum": total, "tokens": count}

    def eval_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        tokens = totals.get("tokens", 0.0)
        if not tokens:
            return {}
        loss = totals["loss_sum"] / tokens
        return {"val_loss": loss, "val_perplexity": math.exp(min(loss, 50.0)),
                "val_bits_per_token": loss / math.log(2), "val_tokens": int(tokens)}

    def _token_losses(self, model: nn.Module,
                      batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Summed cross-entropy (fp32) over the targets kept, and how many were kept."""
        tokens = batch[self.column].long()
        doc = batch["doc"] if "doc" in batch else torch.zeros_like(tokens)  # one document a row
        logits = model(tokens[:, :-1], doc[:, :-1])
        keep = doc[:, 1:] == doc[:, :-1]
        per_token = F.cross_entropy(logits.float().transpose(1, 2), tokens[:, 1:],
                                    reduction="none")
        return (per_token * keep).sum(), keep.sum()
