"""FitRun: the one owner of a `fit`'s state under XLATuner.

The callback's hooks call a `FitRun`; it alone holds whether XLA is on,
the step functions, the step log, the trial, the profile window and the
report. The pieces it uses take values and return results (records,
statistics, a settlement, report sections, findings); the owner applies
them. Data flows one way: batch -> probe -> step records -> accounting ->
epoch statistics -> report -> summaries.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from keras_xla import trial_runner
from keras_xla.core import findings as codes
from keras_xla.core import lints, render
from keras_xla.core.accounting import Accountant
from keras_xla.core.findings import FindingBook
from keras_xla.core.report import EpochStats, JitInfo, XLAReport
from keras_xla.core.timing import steady_signature
from keras_xla.core.trial import AUTO
from keras_xla.settings import Settings
from keras_xla.step_log import StepLog
from keras_xla.tf_backend import compile_cache as cache_lib
from keras_xla.tf_backend import jit as jit_lib
from keras_xla.tf_backend import precision as precision_lib
from keras_xla.tf_backend import unsupported as unsupported_lib
from keras_xla.tf_backend.alignment import tensor_core_misalignment
from keras_xla.tf_backend.hlo_analysis import (
    HloUnavailable,
    analyze_train_step,
)
from keras_xla.tf_backend.profiler import ProfileWindow
from keras_xla.tf_backend.step_functions import StepFunctions
from keras_xla.tf_backend.summaries import SummaryWriter, write_epoch

logger = logging.getLogger(__name__)


class FitRun:
    """The state of one `fit` and what the tuner does with it.

    Args:
        settings: The tuner's checked arguments.
        model: The model being fit.
        params: Keras's callback params (`steps`, `epochs`).
        previous_trial: `(model, kept state, decision)` of an earlier
            fit's trial with the same tuner, or None.
    """

    def __init__(
        self,
        settings: Settings,
        model: Any,
        params: dict | None,
        previous_trial: tuple | None = None,
    ) -> None:
        self.settings = settings
        self.model = model
        self.params = params or {}
        self.report = XLAReport()
        self.book = FindingBook(self.report.findings)
        self.accountant = Accountant(self.report, self.book)
        self.trial_result = previous_trial
        self.active = False
        self.jit_on = False
        self.functions: StepFunctions | None = None
        self.log: StepLog | None = None
        self.trial: trial_runner.TrialRunner | None = None
        self.window: ProfileWindow | None = None
        self._train_calls = 0
        self._hlo_done = False
        self._decided = False  # a decision to write at epoch end
        self._cache_before: dict[str, float] = {}
        self.writer = (
            SummaryWriter(settings.log_dir) if settings.log_dir else None
        )

    # Setup.

    def begin(self) -> None:
        s, model = self.settings, self.model
        auto = AUTO in (s.jit_compile, s.mixed_precision)
        original = trial_runner.ModelState(model) if auto else None
        if s.mixed_precision not in (None, AUTO):
            precision_lib.apply_policy(model, s.mixed_precision)
        for f in precision_lib.check_precision(model):
            self.book.add(f.code, f.message, f.fix, (f.message,))
        self.report.environment = jit_lib.describe_environment(model)
        requested = True if s.jit_compile == AUTO else s.jit_compile
        info, cause = jit_lib.configure_jit(model, requested)
        info.requested = s.jit_compile
        self.report.jit = info
        if cause is not None:
            code, reason, fix = cause
            if s.strict and s.jit_compile is True:
                raise ValueError(f"XLA cannot be enabled: {reason}. {fix}")
            self.book.add(code, f"XLA is off: {reason}.", fix)
        self._report_setup()
        self.jit_on = info.enabled
        if self.jit_on:
            self._preflight()
        native = getattr(model, "_keras_xla_native_probe", False)
        if native or jit_lib.replicas_in_sync(model) == 1:
            self.functions = StepFunctions.of(model)
        spe = int(model.steps_per_execution or 1)
        if auto:
            self._start_trial(original, spe)
        if self.functions is not None:
            self._prepare_functions()
        self.log = StepLog(spe, self.functions)
        self.active = True
        self._drain("before the fit", "train", "test")

    def _report_setup(self) -> None:
        """Findings for bad XLA flags; the compile cache's section."""
        for p in self.settings.flag_problems:
            fix = p.suggestion or "Remove the flag."
            self.book.add(p.code, p.message, fix, (p.variable, p.flag))
        status = self.settings.cache_status
        if status is not None:
            self.report.compile_cache = cache_lib.start_section(status)
            if not status.active:
                self.book.add(
                    codes.COMPILE_CACHE_INACTIVE,
                    status.message,
                    cache_lib.INACTIVE_FIX,
                )

    def _prepare_functions(self, functions=("train", "test")) -> None:
        """(Re)builds the probed step functions if their configuration
        changed; guarded against unsupported ops while XLA is on."""
        model = self.model
        config = (
            self.jit_on,
            int(model.steps_per_execution or 1),
            model.dtype_policy.name,
        )
        wrap = self._guard if self.jit_on else None
        for function in functions:
            self.functions.prepare(model, function, config, wrap)

    # Unsupported ops.

    def _preflight(self) -> None:
        """Looks for unsupported ops before training (custom layers only;
        Keras's own layers declare `supports_jit`)."""
        if not unsupported_lib.has_custom_layers(self.model):
            return
        ops = unsupported_lib.preflight(self.model)
        if ops:
            self._handle_unsupported(ops)

    def _guard(self, function: str, fn: Any) -> Any:
        def fall_back(ops):
            self._handle_unsupported(ops)
            self._prepare_functions()
            return getattr(self.model, f"{function}_function")

        return unsupported_lib.guard(fn, self.model, fall_back)

    def _handle_unsupported(self, ops) -> None:
        """Finding and XLA off (fallback), or `XLAUnsupportedOpError`."""
        message, fix = unsupported_lib.describe_unsupported(ops)
        if self.settings.on_unsupported == "raise":
            raise unsupported_lib.XLAUnsupportedOpError(f"{message} {fix}")
        self.model.jit_compile = False
        self.jit_on = False
        self.report.jit.enabled = False
        self.report.jit.reason = message.rstrip(".")
        self.book.add(
            codes.UNSUPPORTED_OP,
            f"{message} Training continues without XLA (jit_compile=False).",
            fix,
            tuple((op.op_type, op.node) for op in ops),
        )

    # The trial.

    def _start_trial(self, original, spe: int) -> None:
        s = self.settings
        request = trial_runner.Request(
            jit=s.jit_compile,
            precision=s.mixed_precision,
            budget=s.trial_budget,
            xla_possible=self.jit_on,
            epoch_steps=self.params.get("steps"),
            steps_per_call=spe,
            probed=self.functions is not None,
        )
        outcome = trial_runner.plan(
            self.model, request, original, self.trial_result
        )
        if isinstance(outcome, trial_runner.Settlement):
            self._settle(outcome)
        else:
            self.trial = outcome
            self.jit_on = bool(self.model.jit_compile)

    def _trial_step(self, batch: int) -> None:
        runner = self.trial
        if runner.at_boundary():
            records = self.log.collect("train", self.jit_on, batch)
            if runner.close_window(records):
                self._finish_trial()
                return
        if runner.advance(self.model):
            self.jit_on = runner.active.jit
            self._prepare_functions(("train",))

    def _finish_trial(self) -> None:
        runner, self.trial = self.trial, None
        records = self.log.collect("train", self.jit_on)
        self._settle(runner.finish(self.model, records))
        self._prepare_functions()

    def _settle(self, settlement: trial_runner.Settlement) -> None:
        model = self.model
        self.jit_on = bool(model.jit_compile)
        self.report.decision = settlement.decision
        if settlement.skipped is not None:
            self.book.add(codes.TRIAL_SKIPPED, *settlement.skipped)
        if settlement.kept is not None:
            self.trial_result = (model, settlement.kept, settlement.decision)
        self.report.jit = JitInfo(
            self.settings.jit_compile, self.jit_on, settlement.jit_reason()
        )
        self.report.environment["policy"] = model.dtype_policy.name
        self._decided = True

    # Per step: two clock reads; the probe is read once per run.

    def step_begin(self, function: str, batch: int) -> None:
        now = time.perf_counter()
        if not self.active:
            return
        if self.trial is not None and function == "train":
            self.log.close(self.jit_on, now)
            self._trial_step(batch)
        if self.settings.profile_steps is not None and function == "train":
            self._profile_step()
        self.log.begin(function, batch, now, self.jit_on)

    # Epochs and validation runs.

    def _drain(self, when: str, *functions: str) -> None:
        """Steps of the fit's functions that ran outside its own calls
        are set aside, their compilations reported as outside the fit."""
        for function in functions:
            for sig, replica in self.log.drain(function, self.jit_on):
                self.report.outside_compilations.append(
                    {
                        "function": function,
                        "shapes": {t.path: list(t.shape) for t in sig.tensors},
                        "replica": replica,
                        "found": when,
                    }
                )

    def epoch_begin(self, epoch: int) -> None:
        if self.active:
            self._drain(f"before epoch {epoch}", "train", "test")
        self.accountant.start_epoch(epoch)
        status = self.settings.cache_status
        if status is not None:
            self._cache_before = cache_lib.cache_entries(status.directory)

    def test_begin(self) -> None:
        if self.active:
            self._end_train_calls()
            epoch = self.accountant.epoch
            self._drain(f"before validation of epoch {epoch}", "test")

    def _end_train_calls(self) -> None:
        """Validation or the epoch's end: the train calls so far are
        collected, and the trial ends with them."""
        self.log.close(self.jit_on)
        self.log.collect("train", self.jit_on)
        if self.trial is not None:
            self._finish_trial()

    def test_end(self) -> None:
        if not self.active:
            return
        records = self.log.take("test", self.jit_on)
        train_so_far = self.log.collect("train", self.jit_on)
        self.accountant.finish_run("test", records, train_so_far)

    def epoch_end(self, epoch: int) -> None:
        if not self.active:
            return
        self._end_train_calls()
        records = self.log.take("train", self.jit_on)
        stats = self.accountant.finish_epoch(records)
        stats.jit_compile = bool(self.jit_on)
        status = self.settings.cache_status
        if status is not None and status.active:
            hits_misses = cache_lib.label_epoch(
                self.report.compile_cache,
                stats.epoch,
                self.report.compile_log,
                self._cache_before,
                status.directory,
            )
            stats.compile_cache_hits, stats.compile_cache_misses = hits_misses
        self._analyze_hlo(stats, records)
        self._lint(stats, records)
        if self.window is not None and self.report.profile is not None:
            # The report learns of a run's compilations when it ends.
            self.report.profile.tuner_compilations = self.window.count_inside(
                self.report.compile_log
            )
        self._write_epoch(stats)

    def _analyze_hlo(self, stats: EpochStats, records: list) -> None:
        s = self.settings
        if self._hlo_done or not s.analyze_hlo or not self.jit_on:
            return
        signature = steady_signature(records)
        if signature is None:
            return
        self._hlo_done = True
        variant = self.functions.active("train") if self.functions else None
        try:
            self.report.hlo = analyze_train_step(
                self.model,
                signature,
                variant.hlo_results if variant else {},
                stats.epoch,
                stats.step_time_ms["median"],
                self.report.compile_log,
                s.analyze_hlo,
                s.peak_flops,
                s.log_dir,
            )
        except HloUnavailable as why:
            self.book.add(
                codes.HLO_ANALYSIS_OFF,
                f"The HLO analysis is off in this fit: {why}; it never "
                "compiles the step again on its own.",
                "Import keras_xla before TensorFlow runs its first op, or "
                "pass XLATuner(analyze_hlo='compile') to pay one more "
                "compilation for it.",
            )
        except Exception as error:  # noqa: BLE001 - never stop training
            logger.exception("keras_xla: HLO analysis failed")
            self.book.add(
                codes.HLO_ANALYSIS_FAILED,
                f"HLO analysis failed: {type(error).__name__}: {error}",
                "Pass XLATuner(analyze_hlo=False) to skip it.",
            )

    def _lint(self, stats: EpochStats, records: list) -> None:
        misaligned = []
        if stats.epoch == 0:
            signature = steady_signature(records)
            batch = signature.batch_size() if signature else None
            misaligned = tensor_core_misalignment(self.model, batch)
        for code, message, fix in lints.epoch_lints(
            stats.epoch,
            stats.step_time_ms["median"],
            int(getattr(self.model, "steps_per_execution", 1) or 1),
            self.report.total_compile_seconds,
            self.params,
            misaligned,
        ):
            self.book.add(code, message, fix)

    # The profiler window.

    def _profile_step(self) -> None:
        """Before every train call: starts or stops the window."""
        if self.window is None:
            self.window = ProfileWindow(
                self.settings.log_dir, *self.settings.profile_steps
            )
        index, self._train_calls = self._train_calls, self._train_calls + 1
        if self.window.running and index > self.window.stop:
            self._end_profile()
        else:
            self._profiler_error(self.window.begin_at(index))

    def _end_profile(self) -> None:
        if self.window is not None and self.window.running:
            error = self.window.end()
            if not self._profiler_error(error):
                log = self.report.compile_log
                self.report.profile = self.window.section(log)

    def _profiler_error(self, error: str | None) -> bool:
        if error:
            self.book.add(
                codes.PROFILER_BUSY,
                f"The profiler window could not run: {error}",
                "Run one profiler at a time (keras.callbacks.TensorBoard("
                "profile_batch=...) or XLATuner(profile_steps=...)).",
            )
        return bool(error)

    # Outputs.

    def _write_epoch(self, stats: EpochStats) -> None:
        if self.writer is not None:
            write_epoch(self.writer, stats, self.report, self._decided)
            self._decided = False
            self.report.write(self.settings.log_dir)

    def end(self) -> str | None:
        """Ends the fit; returns the summary text (None if inactive)."""
        if not self.active:
            return None
        self.log.close(self.jit_on)
        self._end_profile()
        self.active = False
        if self.functions is not None:
            self.functions.unwrap(self.model)
        if self.writer is not None:
            self.report.write(self.settings.log_dir)
            self.writer.close()
        return render.summary(self.report)

    def tuner_error(self, hook: str, error: Exception) -> None:
        """Records a failure of the tuner itself; training goes on."""
        self.book.add(
            codes.TUNER_ERROR,
            f"XLATuner failed in {hook}: {type(error).__name__}: {error}",
            "Please report this with the log; training continued without "
            "this diagnostic.",
            (hook, type(error).__name__, str(error)),
        )
