"""Feedline inside a Ray driver you already run: your ray.init, Feedline's job, your Ray stays up.

    python examples/embed.py [--epochs N]
"""

import argparse

import ray

import pipeline

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--output", default="")
args = parser.parse_args()

ray.init(include_dashboard=False)  # or ray.init(address="auto") on a cluster node
result = pipeline.run("examples/quickstart.yaml", **{"train.epochs": args.epochs,
                                                     "run.output": args.output})
print(f"val_accuracy={result.summary['val_accuracy']:.3f} output={result.output}")
assert ray.is_initialized(), "Feedline must leave the caller's Ray running"
ray.shutdown()
