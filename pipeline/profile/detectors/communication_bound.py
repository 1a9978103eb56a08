"""communication_bound: exposed all-reduce exceeds ``comm_bound_fraction`` of the training phase.

Exposed means not hidden behind backward (see :mod:`pipeline.profile.comm`); the time a rank
waited in the all-reduce for a peer that was still waiting for its batch or its epoch's start-up
is not communication and is charged to input or start-up instead (:mod:`pipeline.profile.merge`).
Compressing gradients halves the bytes (bf16 needs NCCL on CUDA; fp16 also works with gloo);
larger buckets mean fewer, more efficient collectives; already compressed, PowerSGD cuts bytes
further.
"""

from __future__ import annotations

from pipeline.profile.detectors.base import Facts, Finding, change, current, pct

VERDICT = "communication_bound"


def detect(facts: Facts) -> Finding | None:
    share = facts.costs["communication"]
    if share <= facts.config.comm_bound_fraction:
        return None
    hook = current(facts, "collective.comm_hook")
    cuda = current(facts, "device") == "cuda"
    changes = []
    if hook in (None, "none"):
        new = "bf16" if cuda else "fp16"
        compress = f"try `collective.comm_hook: {new}`"
        changes.append(change("collective.comm_hook", new,
                              f"exposed all-reduce took {pct(share)} of the training phase; "
                              f"{new} gradients halve the bytes"))
    elif hook in ("fp16", "bf16"):
        compress = f"try `collective.comm_hook: powersgd` (now {hook})"
        changes.append(change("collective.comm_hook", "powersgd",
                              f"exposed all-reduce took {pct(share)} of the training phase "
                              f"with {hook} gradients; PowerSGD sends a low-rank sketch"))
    else:
        compress = f"the gradients are already compressed (`collective.comm_hook: {hook}`)"
    cap = current(facts, "collective.bucket_cap_mb")
    if isinstance(cap, (int, float)) and not isinstance(cap, bool):
        bucket = f"a larger `collective.bucket_cap_mb` (from {cap:g} to {cap * 2:g})"
        changes.append(change("collective.bucket_cap_mb", cap * 2,
                              "fewer, larger all-reduces use the link better"))
    else:
        bucket = "a larger `collective.bucket_cap_mb` (e.g. double it)"
    advice = [f"communication-bound: exposed all-reduce took {pct(share)} of the training "
              f"phase → {compress} or {bucket}"]
    if cuda:
        advice.append("check the inter-node transport with `pipeline doctor` (NCCL on TCP "
                      "sockets where RDMA was expected is a common cause)")
    evidence = {"communication_fraction": share,
                "profile.comm_bound_fraction": facts.config.comm_bound_fraction}
    return Finding(verdict=VERDICT, share=share, evidence=evidence, advice=tuple(advice),
                   changes=tuple(changes))
