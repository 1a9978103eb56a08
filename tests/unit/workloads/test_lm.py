"""The language-model task: its attention stays inside documents, its loss is the masked
cross-entropy, and it trains on the CPU in fp32 and bf16 (no Ray)."""

import math
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from pipeline.config import load_config
from pipeline.train.context import TaskContext
from pipeline.train.task import resolve_task
from pipeline.workloads.corpus import docstrings, stdlib_root
from pipeline.workloads.decoder import Decoder, document_mask
from pipeline.workloads.lm import CausalLM
from pipeline.workloads.packing import EOD, VOCAB_SIZE, pack_batch

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "lm.yaml"


def as_batch(rows):
    """Packed rows as the loop hands them to the task: tensors, with ids."""
    batch = {k: torch.from_numpy(v) for k, v in rows.items()}
    batch["id"] = torch.arange(len(rows["tokens"]), dtype=torch.int64)
    return batch


class NextByte(nn.Module):
    """Logit 2 for "the byte after the input byte", 0 for every other token."""

    def forward(self, tokens, doc):
        return 2.0 * nn.functional.one_hot((tokens + 1) % VOCAB_SIZE, VOCAB_SIZE).float()


def test_loss_is_the_cross_entropy_of_the_targets_inside_documents():
    # rows "abc|d" (doc 0 0 0 0 1) and "de|fg" (doc 0 0 0 1 1); "|" is EOD
    batch = as_batch(pack_batch({"text": np.array(["abc", "de", "fg"], dtype=object)},
                                seq_len=4))
    assert batch["tokens"][0, 3] == EOD
    # kept targets: a→b hit, b→c hit, c→| miss; d→e hit, e→| miss, f→g hit (|→d, |→f masked)
    z = math.log(math.exp(2.0) + VOCAB_SIZE - 1)
    hit, miss = z - 2.0, z
    task = CausalLM()
    loss = task.loss(NextByte(), batch)
    assert loss.item() == pytest.approx((4 * hit + 2 * miss) / 6, rel=1e-6)
    unmasked = (4 * hit + 4 * miss) / 8  # what a loss ignoring the boundaries would give
    assert abs(loss.item() - unmasked) > 0.1

    counts = task.eval_counts(NextByte(), batch)
    assert counts["tokens"].item() == 6
    assert counts["loss_sum"].item() == pytest.approx(4 * hit + 2 * miss, rel=1e-6)
    metrics = task.eval_metrics({k: v.item() for k, v in counts.items()})
    assert metrics["val_loss"] == pytest.approx(loss.item(), rel=1e-6)
    assert metrics["val_perplexity"] == pytest.approx(math.exp(loss.item()), rel=1e-6)
    assert metrics["val_tokens"] == 6 and task.eval_metrics({}) == {}


def test_rows_without_doc_are_one_document_each():
    batch = as_batch(pack_batch({"text": np.array(["abc", "de", "fg"], dtype=object)},
                                seq_len=4))
    whole = {**batch, "doc": torch.zeros_like(batch["doc"])}
    plain = {k: v for k, v in batch.items() if k != "doc"}
    task = CausalLM()
    assert task.loss(NextByte(), plain).item() == task.loss(NextByte(), whole).item()
    assert task.eval_counts(NextByte(), plain)["tokens"].item() == 8


def test_attention_stays_inside_each_document():
    assert document_mask(torch.tensor([[0, 0, 1]])).int().tolist() == [[[[1, 0, 0],
                                                                          [1, 1, 0],
                                                                          [0, 0, 1]]]]
    torch.manual_seed(0)
    model = Decoder(vocab_size=VOCAB_SIZE, max_len=8, d_model=32, layers=2, heads=4).eval()
    tokens = torch.tensor([[10, 11, 12, EOD, 20, 21, 22, 23]])
    doc = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]])
    other = tokens.clone()
    other[0, :4] = torch.tensor([50, 51, 52, 53])  # another first document
    with torch.no_grad():
        same = model(tokens, doc)[0, 4:], model(other, doc)[0, 4:]
        mixed = model(tokens)[0, 4:], model(other)[0, 4:]  # no doc: one causal document
    torch.testing.assert_close(*same)
    assert not torch.allclose(*mixed)


def test_build_model_reads_the_token_rows_shape():
    task = CausalLM(d_model=32, layers=1, heads=2)
    model = task.build_model(TaskContext(input_shape=(129,), num_classes=0, train=None))
    assert model.max_len == 128 and model.head.weight is model.embed.weight
    with pytest.raises(ValueError, match="data.source.input"):
        task.build_model(TaskContext(input_shape=(3, 32, 32), num_classes=0, train=None))


def test_the_example_names_this_task_and_it_resolves_and_pickles():
    cfg = load_config(EXAMPLE)
    assert cfg.data.source.function == "pipeline.workloads.lm:datasets"
    assert cfg.data.source.input == "tokens"
    task = resolve_task(cfg.train.task)
    assert isinstance(task, CausalLM)
    assert isinstance(pickle.loads(pickle.dumps(task)), CausalLM)


def test_modules_load_only_what_their_side_needs():
    # Ray Data workers unpickle pack_batch: no torch there; the task module imports no Ray
    code = ("import sys, pipeline.workloads.packing; assert 'torch' not in sys.modules; "
            "import pipeline.workloads.lm; assert 'ray' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def stdlib_rows(rows):
    """Packed rows of real text: the docstrings of json/decoder.py, then json/encoder.py."""
    texts = [doc for name in ("decoder.py", "encoder.py")
             for _, doc in docstrings((stdlib_root() / "json" / name).read_bytes())]
    packed = pack_batch({"text": np.array(texts, dtype=object)}, seq_len=128)
    assert len(packed["tokens"]) >= rows
    return {k: v[:rows] for k, v in packed.items()}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_model_trains_on_the_cpu(precision):
    torch.manual_seed(0)
    cfg = load_config(EXAMPLE)  # AdamW, lr 3e-3, as examples/lm.yaml trains
    task = CausalLM()
    batch = as_batch(stdlib_rows(8))
    ctx = TaskContext(input_shape=tuple(batch["tokens"].shape[1:]), num_classes=0,
                      train=cfg.train)
    optimizer = task.configure_optimizer(model := task.build_model(ctx), ctx)
    assert isinstance(optimizer, torch.optim.AdamW)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    losses = []
    for _ in range(12):  # bf16 takes ~0.65 s a step on this CPU; its loss is 2.96 by step 10
        with autocast:
            loss = task.loss(model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    print(f"{precision}: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert losses[0] == pytest.approx(math.log(VOCAB_SIZE), abs=0.3)  # uniform at the start
    assert losses[-1] < 0.6 * losses[0]
    assert all(p.dtype == torch.float32 for p in model.parameters())
    if precision == "bf16":
        with autocast:
            assert model(batch["tokens"][:, :-1], batch["doc"][:, :-1]).dtype == torch.bfloat16
