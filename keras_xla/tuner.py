"""XLATuner: the Keras callback that turns XLA on and explains what it does.

The callback is a thin conductor: `jit.py` decides whether XLA can be on,
`probe.py` records each step's concrete signature inside the compiled step,
`accounting.py` turns step records into statistics, compile estimates,
explanations and findings, `compile_cache.py` labels cache hits, and
`summaries.py` and `report.py` write the results.
"""

from __future__ import annotations

import logging
import os
import time

import keras
from keras.src.utils import io_utils

from keras_xla import autotune
from keras_xla import compile_cache as cache_lib
from keras_xla import flags as flags_lib
from keras_xla import jit as jit_lib
from keras_xla import precision as precision_lib
from keras_xla import trial as trial_lib
from keras_xla.accounting import Accountant
from keras_xla.diagnostics import Diagnostics
from keras_xla.probe import ModelProbes
from keras_xla.report import EpochStats, XLAReport
from keras_xla.summaries import (
    DECISION_TAG,
    FINDINGS_TAG,
    SummaryWriter,
    epoch_scalars,
)
from keras_xla.timing import StepTimer
from keras_xla.unsupported import CHOICES as UNSUPPORTED_CHOICES
from keras_xla.unsupported import XLAUnsupportedOpError

logger = logging.getLogger(__name__)

TUNER_ERROR = "tuner-error"


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
    epoch, step = epoch): `xla/compilations` (train and validation, first
    ones included), `xla/compile_seconds` (estimated), `xla/recompilations`
    (after each function's first), `xla/step_time_ms_median` and
    `xla/step_time_ms_p90` (train steps that did not compile),
    `xla/examples_per_second` (over those steps) and `xla/jit_compile` (1
    when XLA is on at the epoch's end); after the HLO analysis
    `xla/fusion_ratio`, `xla/kernels_per_step` and `xla/achieved_tflops`;
    with `compile_cache`, `xla/compile_cache_hits` and
    `xla/compile_cache_misses`. Text: `xla/findings` (a Markdown table)
    and, after a trial, `xla/decision`.

    Finding codes: `partial-last-batch`, `batch-size-change`,
    `dynamic-dimension`, `dtype-change`, `rank-change`, `new-input`,
    `removed-input`, `retrace`, `jit-disabled-by-layer`,
    `jit-disabled-by-determinism`, `jit-disabled-run-eagerly`,
    `jit-disabled-by-strategy`, `jit-disabled-by-backend`,
    `compile-cache-inactive`, `unsupported-op`, `dispatch-bound-steps`,
    `compile-dominates`, `tensor-core-alignment`, `profiler-busy`,
    `hlo-analysis-failed`, `trial-skipped`, the codes of
    `keras_xla.flags` and `keras_xla.precision`, `tuner-error`.

    The report (`tuner.report`) is also written to
    `<log_dir>/xla_report.json` at every epoch end and at train end.

    Args:
        log_dir: TensorBoard log directory; give the same one as
            `keras.callbacks.TensorBoard` to see both side by side. `None`
            keeps everything in memory. Defaults to `None`.
        jit_compile: `True` turns XLA on for this `fit` (the train function
            is rebuilt once, in `on_train_begin`), `False` turns it off,
            `None` keeps the model's own setting, `"auto"` measures both
            in a live trial (`keras_xla.trial`) and keeps the faster.
            Defaults to `True`.
        strict: Raise on the tuner's own failures, and when XLA was
            requested but cannot be on, instead of logging them as
            findings. Defaults to `False`.
        verbose: `1` prints a summary table at the end of training, `0`
            only logs it. Defaults to `1`.
        compile_cache: A directory for XLA's persistent compile cache, so a
            restarted run (or another worker or trial) loads compiled steps
            instead of compiling them. Enabled when the tuner is
            constructed, which must happen before the first XLA
            compilation of the process; the report marks each compilation
            as a cache hit or miss. Defaults to `None`.
        on_unsupported: When XLA cannot compile the step (e.g. a
            `tf.py_function` or string op): `"fallback"` records an
            `unsupported-op` finding (op, layer, source line) and trains on
            without XLA; `"raise"` raises `XLAUnsupportedOpError`.
            Defaults to `"fallback"`.
        analyze_hlo: After the first epoch, analyze the train step's
            optimized HLO for that epoch's shapes (`report.hlo`, text under
            `<log_dir>/hlo/`); the extra lowering's seconds are reported.
            Defaults to `True`.
        peak_flops: Peak FLOP/s for the utilization figure; `None` measures
            it with a short matmul probe. Defaults to `None`.
        profile_steps: `(start, stop)` global train steps to trace into
            `<log_dir>/plugins/profile/` (TensorBoard's Profile tab), with
            the trace's compile events in `report.profile`. Defaults to
            `None`.
        mixed_precision: `None` changes nothing and only checks the
            precision setup (findings); a policy name such as
            `"mixed_bfloat16"` applies it to the live model in
            `on_train_begin` (outputs stay float32, loss scaling for
            float16); `"auto"` measures float32 against
            `precision.recommend_policy()` in the trial. Defaults to `None`.
        trial_budget: The trial's length: a fraction of the first epoch's
            steps, or a number of steps. The winner, its speedup over
            Keras's default configuration and its break-even step count go
            to `report.decision` and the `xla/decision` text summary.
            Defaults to `0.25`.

    Example:

    ```python
    tuner = keras_xla.XLATuner(log_dir="logs")
    model.fit(ds, epochs=3, callbacks=[tuner])
    summary = tuner.report.summary()
    ```
    """

    # Only begin hooks, called in the main thread: async batch ends are safe.
    async_safe = True

    def __init__(
        self,
        log_dir: str | os.PathLike | None = None,
        jit_compile: bool | None = True,
        strict: bool = False,
        verbose: int = 1,
        compile_cache: str | os.PathLike | None = None,
        on_unsupported: str = "fallback",
        analyze_hlo: bool = True,
        peak_flops: float | None = None,
        profile_steps: tuple[int, int] | None = None,
        mixed_precision: str | None = None,
        trial_budget: float | int = 0.25,
    ) -> None:
        super().__init__()
        if log_dir is not None and not isinstance(log_dir, (str, os.PathLike)):
            raise ValueError(
                f"Unsupported value `XLATuner(log_dir={log_dir!r})`: pass a "
                "directory path or None."
            )
        for name, value, choices in (
            ("jit_compile", jit_compile, (*jit_lib.JIT_CHOICES, "auto")),
            ("verbose", verbose, (0, 1)),
            ("on_unsupported", on_unsupported, UNSUPPORTED_CHOICES),
        ):
            if value not in choices or isinstance(value, float):
                raise ValueError(
                    f"Unsupported value `XLATuner({name}={value!r})`. "
                    f"Possible choices are: {', '.join(map(repr, choices))}."
                )
        if profile_steps is not None and log_dir is None:
            raise ValueError(
                f"`XLATuner(profile_steps={profile_steps!r})` needs a log_dir."
            )
        self.strict = bool(strict)
        self.log_dir = os.fspath(log_dir) if log_dir is not None else None
        self.on_unsupported = on_unsupported
        self.analyze_hlo = bool(analyze_hlo)
        self.peak_flops = peak_flops
        self.profile_steps = tuple(profile_steps) if profile_steps else None
        trial_lib.validate_budget(trial_budget)
        self.trial_budget = trial_budget
        if mixed_precision not in (None, trial_lib.AUTO):
            precision_lib.float_policy(
                mixed_precision, "XLATuner(mixed_precision"
            )
        self.mixed_precision = mixed_precision
        # A bad TF_XLA_FLAGS/XLA_FLAGS aborts the process at the first XLA
        # use; say so now, in words.
        self._flag_problems = flags_lib.check_flags()
        if self._flag_problems and self.strict:
            flags_lib.validate_flags()
        self.jit_compile = jit_compile
        self.verbose = verbose
        self.compile_cache = None
        self._trial_result = None  # (model, winner's state, decision)
        self._cache_status = None
        if compile_cache is not None:
            # Now, not in on_train_begin: TensorFlow reads the flag at the
            # first XLA compilation of the process.
            self._cache_status = cache_lib.enable_compile_cache(compile_cache)
            self.compile_cache = self._cache_status.directory
        self._reset()

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
        self._guarded(self._flush, "train")

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
        self._accountant = Accountant(self._report)
        self._diagnostics = Diagnostics(self)
        self._active = False
        self._timer = None
        self._trial = None
        self._decided = None  # the trial's decision, to write at epoch end
        self._writer = SummaryWriter(self.log_dir) if self.log_dir else None

    def _train_begin(self) -> None:
        model = self.model
        auto = trial_lib.AUTO in (self.jit_compile, self.mixed_precision)
        original = trial_lib.ModelState(model) if auto else None
        if self.mixed_precision not in (None, trial_lib.AUTO):
            precision_lib.apply_policy(model, self.mixed_precision)
        for f in precision_lib.check_precision(model):
            self._accountant.add_finding(f.code, f.severity, f.message, f.fix)
        self._report.environment = jit_lib.describe_environment(model)
        requested = True if self.jit_compile == "auto" else self.jit_compile
        info, cause = jit_lib.configure_jit(model, requested)
        info.requested = self.jit_compile
        self._report.jit = info
        if cause is not None:
            code, reason, fix = cause
            if self.strict and self.jit_compile is True:
                raise ValueError(f"XLA cannot be enabled: {reason}. {fix}")
            self._accountant.add_finding(
                code, "warning", f"XLA is off: {reason}.", fix
            )
        self._diagnostics.report_setup()
        self._jit_on = info.enabled
        if self._jit_on:
            self._diagnostics.preflight()
        self._probes = None
        native = getattr(model, "_keras_xla_native_probe", False)
        if native or jit_lib.replicas_in_sync(model) == 1:
            self._probes = ModelProbes.of(model)
            self._probes.owner = self
        self._spe = int(model.steps_per_execution or 1)
        if auto:
            self._trial = autotune.start(self, original)
        if self._probes is not None:
            self._rebuild_functions()
        probe = self._probes.probe("train") if self._probes else None
        capacity = probe.slots // self._spe - 1 if probe else 1 << 30
        self._timer = StepTimer(self._spe, capacity, self._on_flush)
        self._active = True

    def _rebuild_functions(self, functions=("train", "test")) -> None:
        """(Re)builds the probed train and test functions if their
        configuration changed; guarded against unsupported ops when XLA
        is on."""
        model = self.model
        config = (
            self._jit_on,
            int(model.steps_per_execution or 1),
            model.dtype_policy.name,
        )
        wrap = self._diagnostics.guard if self._jit_on else None
        for function in functions:
            self._probes.prepare(model, function, config, wrap)

    # Per-step work: two clock reads; the probe is read once per run.

    def _step_begin(self, function: str, batch: int) -> None:
        now = time.perf_counter()
        if not self._active:
            return
        if self._trial is not None and function == "train":
            self._timer.close(now)
            autotune.step(self, batch)
        if self.profile_steps is not None and function == "train":
            self._diagnostics.step_begin()
        self._timer.begin(function, batch, now)

    def _flush(self, function: str) -> None:
        if self._active:
            self._timer.close()
            self._timer.flush(function)
            if self._trial is not None:
                autotune.finish(self)

    def _on_flush(self, function: str, records: list, next_step) -> None:
        if self._probes is not None:
            self._probes.flush(function, records, self._jit_on, next_step)

    def _epoch_begin(self, epoch: int) -> None:
        self._accountant.start_epoch(epoch)
        cache = self.compile_cache
        self._cache_before = cache_lib.cache_entries(cache) if cache else {}

    def _test_end(self) -> None:
        if not self._active:
            return
        records = self._timer.take("test")
        self._accountant.finish_run(
            "test", records, self._timer.records["train"]
        )

    def _epoch_end(self, epoch: int) -> None:
        if not self._active:
            return
        self._flush("train")
        records = self._timer.take("train")
        stats = self._accountant.finish_epoch(records)
        stats.jit_compile = bool(self._jit_on)
        if self._cache_status is not None and self._cache_status.active:
            cache_lib.label_epoch(
                self._report, stats, self._cache_before, self.compile_cache
            )
        self._diagnostics.analyze_hlo(stats, records)
        self._diagnostics.lint(stats, records)
        self._diagnostics.count_profiled()
        self._write_epoch(stats)

    def _write_epoch(self, stats: EpochStats) -> None:
        if self._writer is None:
            return
        scalars = epoch_scalars(stats, self._report.hlo)
        self._writer.write_scalars(stats.epoch, scalars)
        self._writer.write_text(
            stats.epoch, FINDINGS_TAG, self._report.findings_markdown()
        )
        if self._decided is not None:
            self._decided = None
            text = self._report.decision_markdown()
            self._writer.write_text(stats.epoch, DECISION_TAG, text)
        self._writer.flush()
        self._report.write(self.log_dir)

    def _train_end(self) -> None:
        if not self._active:
            return
        self._timer.close()
        self._diagnostics.end_profile()
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
            if self.strict or isinstance(error, XLAUnsupportedOpError):
                raise
            logger.exception("keras_xla: XLATuner failed in %s", fn.__name__)
            self._accountant.add_finding(
                TUNER_ERROR,
                "error",
                f"XLATuner failed in {fn.__name__}: "
                f"{type(error).__name__}: {error}",
                "Please report this with the log; training continued "
                "without this diagnostic.",
            )
