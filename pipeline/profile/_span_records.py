"""Span records and timers of :class:`~pipeline.profile.spans.StepProfiler` (Train worker).

The reusable context managers that ``span`` and ``phase`` hand back (one per phase, built once,
and one shared no-op for a disabled profiler), and the marks of one step until they are resolved
into seconds (:mod:`pipeline.profile._step_resolve`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.profile.spans import StepProfiler


class _NoSpan:
    """The shared no-op span of a disabled profiler."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


_NO_SPAN = _NoSpan()


class _Span:
    """A reusable context manager for one step phase (one per phase, built once)."""

    __slots__ = ("_prof", "_phase", "_start")

    def __init__(self, prof: StepProfiler, phase: str) -> None:
        self._prof, self._phase, self._start = prof, phase, None

    # The hot path: bound methods cached on the profiler, NVTX calls only when on.
    def __enter__(self) -> None:
        prof = self._prof
        mark = prof._mark or prof._bind_clock()
        step = prof._step
        if step.start is None:
            prof._begin_step()
            step.start = mark()
        if prof._push is not None:
            prof._push(self._phase)
        self._start = mark()

    def __exit__(self, *exc: Any) -> None:
        prof = self._prof
        end = prof._mark()
        if prof._pop is not None:
            prof._pop()
        prof._step.spans.append((self._phase, self._start, end))


class _Phase:
    """A reusable context manager for one out-of-step phase."""

    __slots__ = ("_prof", "_phase")

    def __init__(self, prof: StepProfiler, phase: str) -> None:
        self._prof, self._phase = prof, phase

    def __enter__(self) -> None:
        self._prof._enter_phase(self._phase)

    def __exit__(self, *exc: Any) -> None:
        self._prof._exit_phase(self._phase)


class _Step:
    """Marks of one step, resolved into seconds once its last mark is final."""

    __slots__ = ("start", "end", "spans", "added", "comm", "samples", "index", "lead")

    def __init__(self, start: Any = None, lead: float = 0.0) -> None:
        self.start = start
        self.end: Any = None
        self.spans: list[tuple[str, Any, Any]] = []
        self.added: list[tuple[str, float, str | None]] = []
        self.comm: Any = None
        self.samples = 0
        self.index = 0
        # Seconds this step's batch was waited for outside it (the epoch's start-up).
        self.lead = lead
