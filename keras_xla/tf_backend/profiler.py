"""Reading XLA compilations from TensorFlow profiler traces.

The TF profiler records every XLA compilation as host events in the
`.xplane.pb` files it writes under `<log_dir>/plugins/profile/<run>/`. Each
compilation has exactly one backend event whose name ends in
`Compiler::RunBackend` (`CpuCompiler::RunBackend`, `GpuCompiler::...`),
preceded by the HLO pass pipeline events. This is the ground truth the
tuner's counts and estimates are checked against.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import time

from keras_xla.core.report import ProfileSection

BACKEND_SUFFIX = "Compiler::RunBackend"
_EXECUTOR_EVENT = "ExecutorState::Process"


@dataclasses.dataclass(frozen=True)
class CompileEvent:
    """One XLA compilation seen by the profiler (times in seconds).

    Attributes:
        start: Start of the XLA launch that compiled: the executor event
            enclosing the compilation on its thread. Lowering TF to HLO
            happens between this and the first HLO pass and has no event of
            its own.
        passes_start: Start of the first HLO pass of this compilation.
        end: End of the backend (code generation) event.
    """

    start: float
    passes_start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def named_seconds(self) -> float:
        """Span of the named compile events only (HLO passes + backend)."""
        return self.end - self.passes_start


def xplane_files(log_dir: str) -> list[str]:
    """The `.xplane.pb` files under a profiler log dir, oldest first."""
    pattern = os.path.join(log_dir, "**", "*.xplane.pb")
    return sorted(glob.glob(pattern, recursive=True), key=os.path.getmtime)


def read_compile_events(path: str) -> list[CompileEvent]:
    """XLA compilations in one `.xplane.pb` file (or every file under a log
    dir), in time order."""
    if os.path.isdir(path):
        return _read_files(xplane_files(path))
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    out = []
    for plane in space.planes:
        names = {k: m.name for k, m in plane.event_metadata.items()}
        for line in plane.lines:
            out.extend(_line_compiles(line, names))
    return sorted(out, key=lambda e: e.start)


def _read_files(paths: list[str]) -> list[CompileEvent]:
    events = [e for path in paths for e in read_compile_events(path)]
    return sorted(events, key=lambda e: e.start)


def _line_compiles(line, names) -> list[CompileEvent]:
    events = sorted(
        (
            line.timestamp_ns * 1e-9 + ev.offset_ps * 1e-12,
            ev.duration_ps * 1e-12,
            names.get(ev.metadata_id, ""),
        )
        for ev in line.events
    )
    backends = [e for e in events if e[2].endswith(BACKEND_SUFFIX)]
    out = []
    previous_end = float("-inf")
    for b_start, b_dur, _ in backends:
        b_end = b_start + b_dur
        # The pass pipeline opens each compilation ("HLO passes through
        # layout assignment" on CPU and GPU alike).
        passes = [
            s
            for s, d, n in events
            if previous_end <= s <= b_start and n.startswith("HLO passes")
        ]
        passes_start = min(passes) if passes else b_start
        enclosing = [
            s
            for s, d, n in events
            if n == _EXECUTOR_EVENT and s <= passes_start and s + d >= b_end
        ]
        start = max(enclosing) if enclosing else passes_start
        out.append(CompileEvent(start, passes_start, b_end))
        previous_end = b_end
    return out


class ProfileWindow:
    """Captures a TF profiler trace over a range of train steps.

    The trace goes to `<log_dir>/plugins/profile/<run>/`, where
    TensorBoard's Profile tab (tensorboard-plugin-profile) finds it. From
    the same trace, `compile_events()` reads the XLA compilations that
    happened in the window.

    Args:
        log_dir: The TensorBoard log directory.
        start: First global train step (0-based) in the window.
        stop: Last global train step in the window.
    """

    def __init__(self, log_dir: str, start: int, stop: int) -> None:
        if not (isinstance(start, int) and isinstance(stop, int)) or not (
            0 <= start <= stop
        ):
            raise ValueError(
                f"Unsupported value `profile_steps=({start!r}, {stop!r})`: "
                "pass (start, stop) with 0 <= start <= stop."
            )
        self.log_dir = log_dir
        self.start, self.stop = start, stop
        self.running = False
        self.done = False
        self.calls = 0  # train calls seen so far
        # Unix times of the window, to match the tuner's compilations.
        self.started_at = self.ended_at = 0.0
        self._files_before: set[str] = set()

    def begin(self, now: float | None = None) -> str | None:
        """Starts the profiler; returns an error message instead of
        raising when it cannot (another profiler is running, say). `now`:
        the Unix time the first call of the window began, if earlier."""
        import tensorflow as tf

        self._files_before = set(xplane_files(self.log_dir))
        started = time.time() if now is None else min(now, time.time())
        try:
            tf.profiler.experimental.start(self.log_dir)
        except Exception as error:  # noqa: BLE001 - never stop training
            self.done = True
            return f"{type(error).__name__}: {error}".strip()
        self.running = True
        self.started_at = started
        return None

    def end(self) -> str | None:
        """Stops the profiler; returns an error message instead of raising."""
        import tensorflow as tf

        if not self.running:
            return None
        self.running = False
        self.done = True
        self.ended_at = time.time()
        try:
            tf.profiler.experimental.stop()
        except Exception as error:  # noqa: BLE001 - never stop training
            return f"{type(error).__name__}: {error}".strip()
        return None

    def before_call(
        self, compile_log, now: float | None = None
    ) -> tuple[ProfileSection | None, str]:
        """Before each train call of the fit (begun at Unix time `now`):
        starts or stops the profiler where the window says. Returns the
        report's section when the window just closed, and an error message
        ('' if none)."""
        index, self.calls = self.calls, self.calls + 1
        if self.running and index > self.stop:
            return self.finish(compile_log)
        if not self.done and not self.running and index == self.start:
            return None, self.begin(now) or ""
        return None, ""

    def finish(self, compile_log) -> tuple[ProfileSection | None, str]:
        """Stops a running window: its section, or an error message."""
        if not self.running:
            return None, ""
        error = self.end()
        if error:
            return None, error
        return self.section(compile_log), ""

    def section(self, compile_log) -> ProfileSection:
        """The report's `profile` section: the trace's files and compile
        events, and how many of the tuner's compilations (report
        `Compilation`s) started inside the window."""
        events = self.compile_events()
        return ProfileSection(
            steps=[self.start, self.stop],
            directory=os.path.join(self.log_dir, "plugins", "profile"),
            files=self.new_files(),
            profiler_compilations=len(events),
            profiler_compile_seconds=[round(e.seconds, 4) for e in events],
            tuner_compilations=self.count_inside(compile_log),
        )

    def count_inside(self, compile_log) -> int:
        """The compilations whose calls started inside the window."""
        return sum(
            self.started_at <= c.started_at <= self.ended_at
            for c in compile_log
        )

    def new_files(self) -> list[str]:
        return [
            f for f in xplane_files(self.log_dir) if f not in self._files_before
        ]

    def compile_events(self) -> list[CompileEvent]:
        """XLA compilations recorded in this window's trace."""
        return _read_files(self.new_files())


class ProfileRun:
    """A fit's `profile_steps` window: made at its first train call,
    started and stopped by call index, stopped too if the fit is
    interrupted; its section and `profiler-busy` finding go to the fit's
    report and finding book.

    Args:
        log_dir: The TensorBoard log directory.
        steps: `XLATuner(profile_steps=(start, stop))`.
        report: The fit's `XLAReport`.
        book: The fit's `FindingBook`.
    """

    def __init__(self, log_dir: str, steps, report, book) -> None:
        self.window = ProfileWindow(log_dir, *steps)
        self.report, self.book = report, book

    @classmethod
    def of(cls, settings, report, book) -> ProfileRun | None:
        """The window `settings.profile_steps` asks for, or None."""
        if settings.profile_steps is None:
            return None
        return cls(settings.log_dir, settings.profile_steps, report, book)

    def before_call(self, now: float) -> None:
        """Before each train call (begun at Unix time `now`)."""
        log = self.report.compile_log
        self._apply(*self.window.before_call(log, now))

    def finish(self) -> None:
        """At train end: stops a window still open."""
        self._apply(*self.window.finish(self.report.compile_log))

    def count(self) -> None:
        """The report learns of a run's compilations when it ends: the
        section's count of the tuner's compilations in the window."""
        profile = self.report.profile
        if profile is not None:
            log = self.report.compile_log
            profile.tuner_compilations = self.window.count_inside(log)

    def abort(self) -> None:
        """The fit raised: the profiler stops, and the trace written so
        far goes to the report as at a train end."""
        try:
            self.finish()
        finally:
            self.window.end()  # stopped even if reading the trace failed

    def _apply(self, section, error: str) -> None:
        from keras_xla.core import findings

        if section is not None:
            self.report.profile = section
        if error:
            self.book.add(
                findings.PROFILER_BUSY,
                f"The profiler window could not run: {error}",
                "Run one profiler at a time (keras.callbacks.TensorBoard("
                "profile_batch=...) or XLATuner(profile_steps=...)).",
            )
