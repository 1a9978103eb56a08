"""communication_bound: exposed all-reduce exceeds ``comm_bound_fraction`` of a step.

Exposed means not hidden behind backward (see :mod:`pipeline.profile.comm`). Compressing
gradients halves the bytes (bf16 needs NCCL on CUDA; fp16 also works with gloo); larger buckets
mean fewer, more efficient collectives; already compressed, PowerSGD cuts bytes further.
"""

from __future__ import annotations

from pipeline.profile.detectors.base import Facts, Finding, current, pct

VERDICT = "communication_bound"


def detect(facts: Facts) -> Finding | None:
    share = facts.fractions["comm_exposed"]
    if share <= facts.config.comm_bound_fraction:
        return None
    hook = current(facts, "collective.comm_hook")
    cuda = current(facts, "device") == "cuda"
    if hook in (None, "none"):
        compress = f"try `collective.comm_hook: {'bf16' if cuda else 'fp16'}`"
    elif hook in ("fp16", "bf16"):
        compress = f"try `collective.comm_hook: powersgd` (now {hook})"
    else:
        compress = f"the gradients are already compressed (`collective.comm_hook: {hook}`)"
    cap = current(facts, "collective.bucket_cap_mb")
    if isinstance(cap, (int, float)) and not isinstance(cap, bool):
        bucket = f"a larger `collective.bucket_cap_mb` (from {cap:g} to {cap * 2:g})"
    else:
        bucket = "a larger `collective.bucket_cap_mb` (e.g. double it)"
    advice = [f"communication-bound: {pct(share)} of each step is exposed all-reduce → "
              f"{compress} or {bucket}"]
    if cuda:
        advice.append("check the inter-node transport with `pipeline doctor` (NCCL on TCP "
                      "sockets where RDMA was expected is a common cause)")
    evidence = {"comm_exposed_fraction": share,
                "profile.comm_bound_fraction": facts.config.comm_bound_fraction}
    return Finding(verdict=VERDICT, share=share, evidence=evidence, advice=tuple(advice))
