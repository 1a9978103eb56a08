"""Where a stage's Ray actors may run: node labels first, custom resources as the fallback.

Shared by ``data.placement`` (preprocessing actors on CPU nodes) and ``train.placement``
(Train workers on GPU nodes), so each stage scales on its own nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.config.options import option


@dataclass(frozen=True, kw_only=True)
class PlacementConfig:
    """Node selection for one stage's actors."""

    labels: dict[str, str] = field(default_factory=dict, metadata={
        "doc": "node labels the actors must run on (Ray label_selector), "
               "e.g. {feedline.io/role: preprocess}"})
    resources: dict[str, float] = field(default_factory=dict, metadata={
        "doc": "custom resources each actor requests, for clusters without node labels, "
               "e.g. {preprocess: 0.001}"})
    fallback: bool = option(False, "if no node has the labels, run anywhere instead of waiting")

    def check(self) -> list[str]:
        return [f"resources.{k} ({v}) must be > 0" for k, v in self.resources.items() if v <= 0]

    def ray_options(self) -> dict:
        """Keyword arguments for Ray Data's ``map_batches`` / an actor's ``.options``."""
        out: dict = {}
        if self.labels:
            out["label_selector"] = dict(self.labels)
            if self.fallback:
                out["fallback_strategy"] = [{"label_selector": {}}]
        if self.resources:
            out["resources"] = dict(self.resources)
        return out
