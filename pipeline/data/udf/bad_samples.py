"""Bad samples, inside Ray Data workers: the errors, and when there are too many of them.

A sample refused for a known reason raises :class:`BadSample` (its ``error_type`` names it in
the quarantine record); :class:`BadSampleThresholdError` stops the run when the bad samples say
the data itself is broken. Picklable plain classes and pure functions.
"""

from __future__ import annotations

import math
from typing import Any


class BadSample(ValueError):
    """A sample refused for a known reason; ``error_type`` names it in the quarantine record."""

    def __init__(self, error_type: str, message: str):
        super().__init__(message)
        self.error_type = error_type


def first_sources(records: list[dict[str, Any]]) -> str:
    return "; ".join(f"{r['source']} ({r['error_type']}: {r['message']})" for r in records[:3])


def bad_fraction_message(limit: float, bad: int, seen: int, origin: str,
                         records: list[dict[str, Any]]) -> str:
    return (f"data.max_bad_fraction ({limit}) exceeded: {bad} of {seen} samples "
            f"({bad / seen:.1%}) from {origin} could not be read; first: "
            f"{first_sources(records)}. Fix or remove those files, or raise "
            f"data.max_bad_fraction")


# A reader judges the bad fraction only after this many samples, and then stops the run only
# when the fraction is clearly above the limit: the Wilson lower bound at Z standard errors
# exceeds it. A 2.5% bad set with a 5% limit must not stop because 7 of the first 128 samples
# happened to be bad; a fraction just above the limit is caught by the driver's exact check
# over the whole epoch (quarantine.check_bad_fraction).
MIN_SAMPLES_FOR_FRACTION = 100
Z = 3.0


def clearly_above(bad: int, seen: int, limit: float, z: float = Z) -> bool:
    """Whether ``bad`` of ``seen`` shows a bad fraction above ``limit`` beyond sampling noise."""
    if seen < MIN_SAMPLES_FOR_FRACTION:
        return False
    p, z2 = bad / seen, z * z
    spread = z * math.sqrt(p * (1 - p) / seen + z2 / (4 * seen * seen))
    return (p + z2 / (2 * seen) - spread) / (1 + z2 / seen) > limit
