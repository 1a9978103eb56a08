"""transfer_bound: host→device copies take more than ``transfer_bound_fraction`` of the training
phase.

Exposed H2D time means copies are not overlapped with compute or are slow: deeper GPU prefetch
overlaps them, pinned staging makes them asynchronous, uint8 images move a quarter of the bytes.
"""

from __future__ import annotations

from pipeline.profile.detectors.base import Facts, Finding, as_int, change, current, pct

VERDICT = "transfer_bound"


def detect(facts: Facts) -> Finding | None:
    share = facts.costs["transfer"]
    if share <= facts.config.transfer_bound_fraction:
        return None
    changes = []
    depth = as_int(current(facts, "transfer.gpu_prefetch"))
    if depth is not None:
        deeper = f"raise `transfer.gpu_prefetch` from {depth} to {depth + 2}"
        changes.append(change("transfer.gpu_prefetch", depth + 2,
                              f"host→device copies took {pct(share)} of the training phase; "
                              f"more batches in flight overlap them with compute"))
    else:
        deeper = "raise `transfer.gpu_prefetch` (e.g. by 2)"
    advice = [f"transfer-bound: host→device copies took {pct(share)} of the training phase → "
              f"{deeper} so copies overlap compute"]
    if current(facts, "transfer.pin_memory") is False:
        advice.append("set `transfer.pin_memory: true`: copies from pageable memory are "
                      "synchronous and slower")
        changes.append(change("transfer.pin_memory", True,
                              "copies from pageable memory are synchronous"))
    if current(facts, "transfer.ship_uint8") is False:
        advice.append("for image data set `transfer.ship_uint8: true`: uint8 moves 4× fewer "
                      "bytes than float32 and is normalised on the device")
        changes.append(change("transfer.ship_uint8", True,
                              "uint8 images move 4× fewer bytes than float32"))
    evidence = {"transfer_fraction": share,
                "profile.transfer_bound_fraction": facts.config.transfer_bound_fraction}
    return Finding(verdict=VERDICT, share=share, evidence=evidence, advice=tuple(advice),
                   changes=tuple(changes))
