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


class ProfileRun:
    """A fit's `profile_steps` window: a TF profiler trace over a range of
    train steps, started and stopped by call index, stopped too if the fit
    is interrupted. The trace goes to `<log_dir>/plugins/profile/<run>/`,
    where TensorBoard's Profile tab (tensorboard-plugin-profile) finds it;
    its section (the XLA compilations the trace holds) and `profiler-busy`
    finding go to the fit's report and finding book.

    Args:
        settings: The fit's `Settings`: its `log_dir` (TensorBoard's) and
            `profile_steps`, the first and last global train step (0-based)
            in the window, checked by `settings.check_profile_steps`.
        report: The fit's `XLAReport`.
        book: The fit's `FindingBook`.
    """

    def __init__(self, settings, report, book) -> None:
        self.log_dir = settings.log_dir
        self.start, self.stop = settings.profile_steps
        self.report, self.book = report, book
        self.running = self.done = False
        self.calls = 0  # train calls seen so far
        # Unix times of the window, to match the tuner's compilations.
        self.started_at = self.ended_at = 0.0
        self._files_before: set[str] = set()

    def before_call(self, now: float) -> None:
        """Before each train call (begun at Unix time `now`): starts or
        stops the profiler where the window says."""
        index, self.calls = self.calls, self.calls + 1
        if self.running and index > self.stop:
            self.finish()
        elif not self.done and not self.running and index == self.start:
            self._begin(now)

    def _begin(self, now: float) -> None:
        """Starts the profiler; a profiler that cannot start (another one
        is running, say) is a finding, not an error."""
        import tensorflow as tf

        self._files_before = set(xplane_files(self.log_dir))
        started = min(now, time.time())
        try:
            tf.profiler.experimental.start(self.log_dir)
        except Exception as error:  # noqa: BLE001 - never stop training
            self.done = True
            self._busy(error)
            return
        self.running = True
        self.started_at = started

    def _end(self) -> Exception | None:
        """Stops a running profiler; returns what it raised, if anything."""
        import tensorflow as tf

        if not self.running:
            return None
        self.running = False
        self.done = True
        self.ended_at = time.time()
        try:
            tf.profiler.experimental.stop()
        except Exception as error:  # noqa: BLE001 - never stop training
            return error
        return None

    def finish(self) -> None:
        """At train end (or past the window): stops a running window and
        puts its section in the report."""
        if not self.running:
            return
        error = self._end()
        if error is not None:
            self._busy(error)
            return
        files = [
            f for f in xplane_files(self.log_dir) if f not in self._files_before
        ]
        events = _read_files(files)
        self.report.profile = ProfileSection(
            steps=[self.start, self.stop],
            directory=os.path.join(self.log_dir, "plugins", "profile"),
            files=files,
            profiler_compilations=len(events),
            profiler_compile_seconds=[round(e.seconds, 4) for e in events],
            tuner_compilations=self._count_inside(),
        )

    def count(self) -> None:
        """The report learns of a run's compilations when it ends: the
        section's count of the tuner's compilations in the window."""
        profile = self.report.profile
        if profile is not None:
            profile.tuner_compilations = self._count_inside()

    def _count_inside(self) -> int:
        """The compilations whose calls started inside the window."""
        return sum(
            self.started_at <= c.started_at <= self.ended_at
            for c in self.report.compile_log
        )

    def abort(self) -> None:
        """The fit raised: the profiler stops, and the trace written so
        far goes to the report as at a train end."""
        try:
            self.finish()
        finally:
            self._end()  # stopped even if reading the trace failed

    def _busy(self, error: Exception) -> None:
        from keras_xla.core import findings

        self.book.add(
            findings.PROFILER_BUSY,
            "The profiler window could not run: "
            f"{type(error).__name__}: {error}".strip(),
            "Run one profiler at a time (keras.callbacks.TensorBoard("
            "profile_batch=...) or XLATuner(profile_steps=...)).",
        )
