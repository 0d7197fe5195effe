"""XLATuner: the Keras callback that turns XLA on and explains what it does.

The callback is a thin conductor: `jit.py` decides whether XLA can be on,
`probe.py` records each step's concrete signature inside the compiled step,
`signatures.py` explains new ones, `timing.py` turns wall times into
statistics and compile-time estimates, `summaries.py` and `report.py` write
the results.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from typing import Any

import keras
from keras.src.utils import io_utils

from keras_xla import jit as jit_lib
from keras_xla.probe import ModelProbes
from keras_xla.report import (
    Compilation,
    EpochStats,
    Finding,
    Recompilation,
    XLAReport,
)
from keras_xla.signatures import FINDING_CODES, describe, explain, fix_for
from keras_xla.summaries import FINDINGS_TAG, SummaryWriter
from keras_xla.timing import (
    StepRecord,
    estimate_compile_seconds,
    run_statistics,
)

logger = logging.getLogger(__name__)

TUNER_ERROR = "tuner-error"


class XLARecompilationWarning(UserWarning):
    """XLA compiled a step again because an input's shape or dtype drifted."""


class XLATuner(keras.callbacks.Callback):
    """Turns XLA on for `fit`, counts its compilations and explains them.

    XLA compiles the train step once per concrete input signature. Keras
    traces the step with relaxed shapes, so its trace count stays flat
    while XLA recompiles for every new shape (a partial last batch, a new
    padded length). This callback records each step's signature from
    inside the compiled step, counts compilations exactly (also with
    `steps_per_execution > 1` and across `fit` calls), estimates their cost
    and names the input, dimension, shapes, cause and fix of each
    recompilation. When Keras silently keeps XLA off, the report says why.

    Logged metrics (TensorBoard scalars in `<log_dir>/train`, one point per
    epoch, step = epoch):

    - `xla/compilations`: XLA compilations in the epoch (train and
      validation, first ones included).
    - `xla/compile_seconds`: estimated seconds spent compiling.
    - `xla/recompilations`: compilations after each function's first.
    - `xla/step_time_ms_median`, `xla/step_time_ms_p90`: train step wall
      time over the steps that did not compile.
    - `xla/examples_per_second`: train examples per second over those steps.
    - `xla/findings` (text): the findings as a Markdown table.

    Finding codes: `partial-last-batch`, `batch-size-change`,
    `dynamic-dimension`, `dtype-change`, `rank-change`, `new-input`,
    `removed-input`, `retrace`, `jit-disabled-by-layer`,
    `jit-disabled-by-determinism`, `jit-disabled-run-eagerly`,
    `jit-disabled-by-strategy`, `jit-disabled-by-backend`, `tuner-error`.

    The report (`tuner.report`) is also written to
    `<log_dir>/xla_report.json` at every epoch end and at train end.

    Args:
        log_dir: TensorBoard log directory; give the same one as
            `keras.callbacks.TensorBoard` to see both side by side. `None`
            keeps everything in memory. Defaults to `None`.
        jit_compile: `True` turns XLA on for this `fit` (the train function
            is rebuilt once, in `on_train_begin`), `False` turns it off,
            `None` keeps the model's own setting. Defaults to `True`.
        strict: Raise on the tuner's own failures, and when XLA was
            requested but cannot be on, instead of logging them as
            findings. Defaults to `False`.
        verbose: `1` prints a summary table at the end of training, `0`
            only logs it. Defaults to `1`.

    Example:

    ```python
    tuner = keras_xla.XLATuner(log_dir="logs")
    model.fit(ds, epochs=3, callbacks=[tuner])
    print(tuner.report.summary())
    ```
    """

    # Our batch hooks are begin hooks (always called in the main thread);
    # declaring this keeps Keras's asynchronous batch-end dispatch intact.
    async_safe = True

    def __init__(
        self,
        log_dir: str | os.PathLike | None = None,
        jit_compile: bool | None = True,
        strict: bool = False,
        verbose: int = 1,
    ) -> None:
        super().__init__()
        if log_dir is not None and not isinstance(log_dir, (str, os.PathLike)):
            raise ValueError(
                f"Unsupported value `XLATuner(log_dir={log_dir!r})`: pass a "
                "directory path or None."
            )
        if jit_compile not in jit_lib.JIT_CHOICES:
            raise ValueError(
                f"Unsupported value `XLATuner(jit_compile={jit_compile!r})`. "
                "Possible choices are: True, False, None."
            )
        if verbose not in (0, 1):
            raise ValueError(
                f"Unsupported value `XLATuner(verbose={verbose!r})`. "
                "Possible choices are: 0, 1."
            )
        self.log_dir = os.fspath(log_dir) if log_dir is not None else None
        self.jit_compile = jit_compile
        self.strict = bool(strict)
        self.verbose = verbose
        self._report = XLAReport()
        self._active = False
        self._writer = None

    @property
    def report(self) -> XLAReport:
        """The `XLAReport` of the current (or last) `fit`."""
        return self._report

    # Keras hooks: each one is a guarded call to a private helper.

    def on_train_begin(self, logs=None):
        self._reset()
        self._guarded(self._train_begin)

    def on_epoch_begin(self, epoch, logs=None):
        self._guarded(self._epoch_begin, epoch)

    def on_train_batch_begin(self, batch, logs=None):
        self._guarded(self._step_begin, "train", batch)

    def on_test_begin(self, logs=None):
        self._guarded(self._close_step)

    def on_test_batch_begin(self, batch, logs=None):
        self._guarded(self._step_begin, "test", batch)

    def on_test_end(self, logs=None):
        self._guarded(self._test_end)

    def on_epoch_end(self, epoch, logs=None):
        self._guarded(self._epoch_end, epoch)

    def on_train_end(self, logs=None):
        self._guarded(self._train_end)

    # Setup.

    def _reset(self) -> None:
        # Allow instances to be re-used across fit calls.
        self._report = XLAReport()
        self._active = False
        self._open = None
        self._epoch = 0
        self._records = {"train": [], "test": []}
        self._epoch_results = {}
        self._medians = {}
        self._findings = {}
        self._writer = SummaryWriter(self.log_dir) if self.log_dir else None
        # Unix time = perf_counter() + offset, without a second clock read
        # per step.
        self._clock_offset = time.time() - time.perf_counter()

    def _train_begin(self) -> None:
        model = self.model
        self._report.environment = _environment(model)
        info, cause = jit_lib.configure_jit(model, self.jit_compile)
        self._report.jit = info
        if cause is not None:
            code, reason, fix = cause
            if self.strict and self.jit_compile:
                raise ValueError(f"XLA cannot be enabled: {reason}. {fix}")
            self._add_finding(code, "warning", f"XLA is off: {reason}.", fix)
        self._jit_on = info.enabled
        self._probes = None
        native = getattr(model, "_keras_xla_native_probe", False)
        if native or jit_lib.replicas_in_sync(model) == 1:
            self._probes = ModelProbes.of(model)
            config = (info.enabled, int(model.steps_per_execution or 1))
            for function in ("train", "test"):
                self._probes.prepare(model, function, config)
        self._active = True

    # Per-step work: kept to a clock read and one small variable read.

    def _step_begin(self, function: str, batch: int) -> None:
        if not self._active:
            return
        self._close_step()
        self._open = (function, batch, time.perf_counter())

    def _close_step(self) -> None:
        now = time.perf_counter()
        if not self._active or self._open is None:
            return
        function, batch, start = self._open
        self._open = None
        probe = self._probes.probe(function) if self._probes else None
        record = StepRecord(
            function,
            batch,
            now - start,
            started_at=self._clock_offset + start,
            fallback_steps=int(self.model.steps_per_execution or 1),
        )
        if probe is not None:
            record.signatures = probe.read_new()
            record.trace_seconds = probe.pop_trace_seconds()
            if self._jit_on:
                tracker = self._probes.tracker
                record.new = [
                    (i, r)
                    for i, step in enumerate(record.signatures)
                    for r, sig in enumerate(step)
                    if tracker.observe(function, sig, r)
                ]
        self._records[function].append(record)

    # Epoch and validation ends: statistics, explanations, outputs.

    def _epoch_begin(self, epoch: int) -> None:
        self._epoch = epoch
        self._records = {"train": [], "test": []}
        self._epoch_results = {}

    def _test_end(self) -> None:
        if not self._active:
            return
        self._close_step()
        self._finish_run("test")

    def _epoch_end(self, epoch: int) -> None:
        if not self._active:
            return
        self._close_step()
        train = self._finish_run("train")
        test = self._epoch_results.get("test", {})
        stats = train["stats"]
        compilations = train["compilations"] + test.get("compilations", 0)
        compile_s = train["compile_seconds"] + test.get("compile_seconds", 0)
        recompiles = train["recompilations"] + test.get("recompilations", 0)
        epoch_stats = EpochStats(
            epoch=epoch,
            steps=stats.steps,
            compilations=compilations,
            compile_seconds=round(compile_s, 4),
            recompilations=recompiles,
            step_time_ms={
                "median": _ms(stats.median_seconds),
                "p90": _ms(stats.p90_seconds),
            },
            examples_per_second=_round(stats.examples_per_second),
            examples_per_second_overall=_round(
                stats.examples_per_second_overall
            ),
            by_function={
                name: {k: v for k, v in result.items() if k != "stats"}
                for name, result in (("train", train), ("test", test))
                if result
            },
        )
        self._report.epochs.append(epoch_stats)
        # Validation finishes before the epoch: restore time order.
        self._report.compile_log.sort(key=lambda c: c.started_at)
        self._write_epoch(epoch_stats)

    def _finish_run(self, function: str) -> dict:
        """Statistics, compile estimates and recompilation entries for the
        records of one function since the last call; merges them into this
        epoch's results."""
        records = self._records[function]
        self._records[function] = []
        stats = run_statistics(records, self._reference_median(function))
        if stats.steady_steps:
            self._medians[function] = stats.median_seconds
        compilations, compile_s, recompiles = 0, 0.0, 0
        histories = {}

        def history(replica):
            # Signatures compiled before, and where each one sits.
            if replica not in histories:
                compiled = self._probes.tracker.compiled(function, replica)
                index = {sig: i for i, sig in enumerate(compiled)}
                histories[replica] = (compiled, index)
            return histories[replica]

        for r_index, record in enumerate(records):
            if not record.new:
                continue
            seconds = estimate_compile_seconds(record, stats.median_seconds)
            explained = set()
            for index, replica in record.new:
                compilations += 1
                compile_s += seconds
                sig = record.signatures[index][replica]
                compiled, position = history(replica)
                previous = compiled[: position[sig]]
                step = record.first_step + index
                self._report.compile_log.append(
                    Compilation(
                        function=function,
                        epoch=self._epoch,
                        step=step,
                        shapes={t.path: list(t.shape) for t in sig.tensors},
                        compile_seconds=round(seconds, 4),
                        first=not previous,
                        started_at=round(record.started_at, 6),
                        replica=replica,
                    )
                )
                if not previous:
                    continue  # the function's first compilation
                recompiles += 1
                if sig.tensors in explained:
                    continue  # the same shapes on another replica
                explained.add(sig.tensors)
                last = r_index == len(records) - 1 and index == (
                    len(record.signatures) - 1
                )
                self._explain(function, step, previous, sig, last, seconds)
        result = self._epoch_results.setdefault(
            function,
            {"compilations": 0, "compile_seconds": 0.0, "recompilations": 0},
        )
        result["compilations"] += compilations
        result["compile_seconds"] = round(
            result["compile_seconds"] + compile_s, 4
        )
        result["recompilations"] += recompiles
        result["stats"] = stats
        return result

    def _reference_median(self, function: str) -> float | None:
        """Per-step time to compare compiled steps with when a run has no
        step that did not compile (a two-batch validation run): the
        function's last steady median, else this epoch's train median (a
        test step does less work than a train step)."""
        if function in self._medians:
            return self._medians[function]
        if function != "train" and self._records["train"]:
            stats = run_statistics(self._records["train"])
            if stats.steady_steps:
                return stats.median_seconds
        return self._medians.get("train")

    def _explain(self, function, step, previous, sig, last, seconds):
        change, changes = explain(previous, sig, last)
        fix = fix_for(change)
        message = describe(change, function, changes)
        self._report.recompilations.append(
            Recompilation(
                function=function,
                epoch=self._epoch,
                step=step,
                input=change.input,
                dim=change.dim,
                before=change.before,
                after=change.after,
                cause=change.cause,
                compile_seconds=round(seconds, 4),
                message=f"{message} Recompiled in {seconds:.2f} s.",
                fix=fix,
                changes=[
                    {
                        "input": c.input,
                        "dim": c.dim,
                        "before": c.before,
                        "after": c.after,
                        "cause": c.cause,
                    }
                    for c in changes
                ],
            )
        )
        key = (function, change.input, change.dim, change.cause)
        self._add_finding(
            FINDING_CODES[change.cause], "warning", message, fix, key, seconds
        )

    def _add_finding(
        self, code, severity, message, fix, key=None, compile_seconds=0.0
    ) -> None:
        key = key or (code, message)
        finding = self._findings.get(key)
        if finding is None:
            finding = Finding(code, severity, message, fix, 0, 0.0)
            self._findings[key] = finding
            self._report.findings.append(finding)
            warnings.warn(
                f"[{code}] {message} Fix: {fix}",
                XLARecompilationWarning
                if code in FINDING_CODES.values()
                else UserWarning,
                stacklevel=3,
            )
        finding.count += 1
        finding.compile_seconds = round(
            finding.compile_seconds + compile_seconds, 4
        )
        if key[0] in ("train", "test") and finding.count > 1:
            finding.message = (
                f"{message} Seen {finding.count} times, "
                f"{finding.compile_seconds:.2f} s of compiling."
            )

    def _write_epoch(self, stats: EpochStats) -> None:
        if self._writer is None:
            return
        self._writer.write_scalars(
            stats.epoch,
            {
                "xla/compilations": stats.compilations,
                "xla/compile_seconds": stats.compile_seconds,
                "xla/recompilations": stats.recompilations,
                "xla/step_time_ms_median": stats.step_time_ms["median"],
                "xla/step_time_ms_p90": stats.step_time_ms["p90"],
                "xla/examples_per_second": stats.examples_per_second or 0.0,
            },
        )
        self._writer.write_text(
            stats.epoch, FINDINGS_TAG, self._report.findings_markdown()
        )
        self._writer.flush()
        self._report.write(self.log_dir)

    def _train_end(self) -> None:
        if not self._active:
            return
        self._close_step()
        self._active = False
        if self._writer is not None:
            self._report.write(self.log_dir)
            self._writer.close()
        summary = self._report.summary()
        logger.info("keras_xla summary:\n%s", summary)
        if self.verbose:
            io_utils.print_msg(summary)

    # Failures of the tuner itself never stop training.

    def _guarded(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as error:  # noqa: BLE001
            if self.strict:
                raise
            logger.exception("keras_xla: XLATuner failed in %s", fn.__name__)
            try:
                self._add_finding(
                    TUNER_ERROR,
                    "error",
                    f"XLATuner failed in {fn.__name__}: "
                    f"{type(error).__name__}: {error}",
                    "Please report this with the log; training continued "
                    "without this diagnostic.",
                )
            except Exception:  # noqa: BLE001
                logger.exception("keras_xla: could not record the failure")


def _environment(model: Any) -> dict:
    import tensorflow as tf

    strategy = model.distribute_strategy
    policy = getattr(model, "dtype_policy", None)
    return {
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "backend": keras.backend.backend(),
        "devices": [d.name for d in tf.config.list_logical_devices()],
        "strategy": type(strategy).__name__,
        "replicas": int(getattr(strategy, "num_replicas_in_sync", 1)),
        "policy": getattr(policy, "name", str(policy)),
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 4)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
