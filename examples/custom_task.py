"""The quickstart with a task of your own: label-smoothed cross-entropy, AdamW and a cosine
schedule, and a second validation metric. Feedline's loop still owns the device, DDP, backward,
the spans, checkpoints and exactly-once accounting; the task owns the math.

    python examples/custom_task.py [--epochs N] [--output DIR]

The task class travels to the Train workers by pickle: defined in this script (``__main__``), it
is sent by value; defined in a module, that module must be importable on every node (and then
``train.task: mymodule:SmoothedClassification`` names it from YAML as well).
"""

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F

import pipeline
from pipeline.train.task import inputs


class SmoothedClassification(pipeline.ClassificationTask):
    """``train.model`` as before (the quickstart's CNN); what changes is below."""

    def __init__(self, smoothing: float = 0.1):
        self.smoothing = smoothing

    def configure_optimizer(self, model, ctx):
        # no weight decay on biases; ctx.train is the run's train section
        decay = [p for n, p in model.named_parameters() if not n.endswith("bias")]
        other = [p for n, p in model.named_parameters() if n.endswith("bias")]
        return torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                                  {"params": other, "weight_decay": 0.0}], lr=ctx.train.lr)

    def loss(self, model, batch):
        return F.cross_entropy(model(inputs(batch)), batch["label"],
                               label_smoothing=self.smoothing)

    def eval_counts(self, model, batch):
        # sums per batch, as device tensors: the loop adds them up over batches and ranks
        logits, y = model(inputs(batch)), batch["label"]
        return {"correct": (logits.argmax(dim=1) == y).sum(), "total": y.new_full((), len(y)),
                "top2": (logits.topk(2, dim=1).indices == y[:, None]).any(dim=1).sum()}

    def eval_metrics(self, totals):
        metrics = super().eval_metrics(totals)  # val_accuracy, val_samples
        if totals.get("total"):
            metrics["val_top2_accuracy"] = totals["top2"] / totals["total"]
        return metrics


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--output", default="")
    args = parser.parse_args()
    result = pipeline.run(
        Path(__file__).with_name("quickstart.yaml"), task=SmoothedClassification(),
        sets=[f"train.epochs={args.epochs}", "train.lr=0.003", "train.lr_schedule=cosine",
              f"run.output={args.output}"])
    summary = result.summary
    print(f"task={summary['task']} val_metrics={summary['val_metrics']} "
          f"exactly_once={summary['exactly_once']} output={result.output}")


if __name__ == "__main__":
    main()
