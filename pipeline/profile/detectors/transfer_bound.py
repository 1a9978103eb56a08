"""transfer_bound: host→device copies take more than ``transfer_bound_fraction`` of a step.

Exposed H2D time means copies are not overlapped with compute or are slow: deeper GPU prefetch
overlaps them, pinned staging makes them asynchronous, uint8 images move a quarter of the bytes.
"""

from __future__ import annotations

from pipeline.profile.detectors.base import Facts, Finding, current, pct

VERDICT = "transfer_bound"


def detect(facts: Facts) -> Finding | None:
    share = facts.fractions["h2d"]
    if share <= facts.config.transfer_bound_fraction:
        return None
    depth = current(facts, "transfer.gpu_prefetch")
    if isinstance(depth, int) and not isinstance(depth, bool):
        deeper = f"raise `transfer.gpu_prefetch` from {depth} to {depth + 2}"
    else:
        deeper = "raise `transfer.gpu_prefetch` (e.g. by 2)"
    advice = [f"transfer-bound: host→device copies took {pct(share)} of each step → {deeper} "
              f"so copies overlap compute"]
    if current(facts, "transfer.pin_memory") is False:
        advice.append("set `transfer.pin_memory: true`: copies from pageable memory are "
                      "synchronous and slower")
    if current(facts, "transfer.ship_uint8") is False:
        advice.append("for image data set `transfer.ship_uint8: true`: uint8 moves 4× fewer "
                      "bytes than float32 and is normalised on the device")
    evidence = {"h2d_fraction": share,
                "profile.transfer_bound_fraction": facts.config.transfer_bound_fraction}
    return Finding(verdict=VERDICT, share=share, evidence=evidence, advice=tuple(advice))
