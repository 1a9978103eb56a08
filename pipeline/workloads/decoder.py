"""A small decoder-only transformer over packed sequences (Train worker; torch.nn only).

GPT-2's shape at toy size: token and learned position embeddings, pre-norm blocks of causal
self-attention and a GELU MLP, a final LayerNorm and an output layer tied to the token
embedding. Attention is block-diagonal as well as causal: a position attends only to earlier
positions of its own document (``doc``, from :mod:`pipeline.workloads.packing`), so packing
several documents into one row changes nothing a document sees. Built on the CPU; the loop
moves it to the device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def document_mask(doc: torch.Tensor) -> torch.Tensor:
    """``(N, 1, T, T)`` boolean attention mask from ``doc`` ``(N, T)``: query i may attend to
    key j when j <= i and both are in the same document."""
    t = doc.shape[-1]
    causal = torch.ones(t, t, dtype=torch.bool, device=doc.device).tril()
    same = doc[:, :, None] == doc[:, None, :]
    return (same & causal)[:, None]


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d_model: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))
        self.dropout = dropout

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        n, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(n, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        drop = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)
        x = x + self.proj(y.transpose(1, 2).reshape(n, t, d))
        return x + self.mlp(self.ln2(x))


class Decoder(nn.Module):
    """``forward(tokens (N, T) int64, doc (N, T) or None) -> logits (N, T, vocab_size)``;
    without ``doc`` the whole row is one document (plain causal attention)."""

    def __init__(self, *, vocab_size: int, max_len: int, d_model: int = 128, layers: int = 2,
                 heads: int = 4, dropout: float = 0.0):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model ({d_model}) must be a multiple of heads ({heads})")
        self.max_len = max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads, dropout) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.embed.weight  # tied: fewer parameters, faster start
        self.apply(_init)
        for block in self.blocks:  # GPT-2: residual projections scaled by depth
            for proj in (block.proj, block.mlp[2]):
                nn.init.normal_(proj.weight, std=0.02 / (2 * layers) ** 0.5)

    def forward(self, tokens: torch.Tensor, doc: torch.Tensor | None = None) -> torch.Tensor:
        n, t = tokens.shape
        if t > self.max_len:
            raise ValueError(f"sequence of {t} tokens is longer than the model's max_len "
                             f"({self.max_len})")
        if doc is None:
            doc = torch.zeros_like(tokens)
        positions = torch.arange(t, device=tokens.device)
        x = self.embed(tokens) + self.position(positions)
        mask = document_mask(doc)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln(x))


def _init(module: nn.Module) -> None:
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
