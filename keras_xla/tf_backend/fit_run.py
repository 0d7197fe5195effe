"""FitRun: the owner of a `fit` on Keras's TensorFlow backend.

`keras_xla.fit_owner.FitOwner` holds every hook; this adds what is
TensorFlow's: the fit's setup (`fit_setup`), the probed step functions
(one per configuration, guarded against ops without an XLA kernel),
auto-clustering, the profile window, the mirrored compile cache's labels,
the HLO checks, and what the fit borrows of the model (`ModelLease`).
Data flows one way: batch -> probe -> step records -> accounting ->
epoch statistics -> report -> summaries.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from keras_xla import xla_setting
from keras_xla.auto import runner as auto_runner
from keras_xla.auto.model_state import ModelState
from keras_xla.auto.policy import AUTO
from keras_xla.core import findings as codes
from keras_xla.fit_owner import FitOwner
from keras_xla.settings import Settings
from keras_xla.tf_backend import (
    autoclustering,
    cache_savings,
    compile_ledger,
    epoch_checks,
    fit_setup,
    hlo_analysis,
)
from keras_xla.tf_backend import compile_cache as cache_lib
from keras_xla.tf_backend import jit as jit_lib
from keras_xla.tf_backend import unsupported as unsupported_lib
from keras_xla.tf_backend.model_lease import ModelLease
from keras_xla.tf_backend.profiler import ProfileRun, on_error
from keras_xla.tf_backend.step_functions import (
    FUNCTIONS,
    Config,
    StepFunctions,
)
from keras_xla.tf_backend.step_log import CLUSTERS, JIT, StepLog

logger = logging.getLogger(__name__)


class FitRun(FitOwner):
    """The state of one `fit` on TensorFlow (`FitOwner`'s hooks).

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
        super().__init__(settings, model, params, previous_trial)
        self._configured = False  # jit_compile applied to the model
        self._clustering = False
        self.functions: StepFunctions | None = None
        self.log: StepLog | None = None
        self.trial: auto_runner.TrialRunner | None = None
        # The optimizer's step count before a no-XLA baseline call in an
        # epoch of unknown length (None once the call ended).
        self._count_before: int | None = None
        # XLA's compilations the ledger had recorded at the guard's last
        # look (None: not looked yet).
        self._written: int | None = None
        self.profile = ProfileRun.of(settings, self.report, self.book)
        self._hlo_done = False
        self._cache_before: dict[str, float] = {}
        # The model as the fit found it, put back when it ends (`keep`).
        self.lease: ModelLease | None = None

    def begin(self) -> None:
        s, model = self.settings, self.model
        self.lease = ModelLease(model)
        auto = AUTO in (s.jit_compile, s.mixed_precision)
        original = self.lease.user if auto else None
        setup = fit_setup.configure(s, model)
        report = self.report
        report.environment, report.jit = setup.environment, setup.jit
        report.compile_cache = setup.compile_cache or report.compile_cache
        for code, message, fix, place in setup.findings:
            self.book.add(code, message, fix, place)
        self._configured = True
        if self.jit_on:
            self._preflight()
        self._settle_clustering()
        native = getattr(model, "_keras_xla_native_probe", False)
        if native or jit_lib.replicas_in_sync(model) == 1:
            self.functions = StepFunctions.of(model)
            self._forget_plain_steps()
        spe = int(model.steps_per_execution or 1)
        if auto:
            self._start_trial(original, spe)
        if self.jit_on and (not auto or self._trial_skipped()):
            # XLA trains: its verdict needs the no-XLA baseline.
            self._start_trial(None, spe)
        if self.functions is not None:
            self._prepare_functions()
        cache = s.cache_status
        run = weakref.ref(self)  # the model must not keep the fit alive
        self.log = StepLog(
            spe,
            self.functions,
            compile_ledger.status().directory,
            stamp_calls=bool(cache and cache.active and cache.live),
            counting=lambda: run() and run().counting,
        )
        self.active = True
        self.lease.watch(lambda: run() and run().interrupted())
        self._outside("before the fit")

    def _forget_plain_steps(self) -> None:
        """Steps the model's no-XLA step functions ran since the last fit
        (the user's `evaluate`, `predict` or `fit` on the functions it was
        left with) compiled nothing: their probe's records are dropped, so
        `_outside` does not report them as XLA's compilations."""
        for function in FUNCTIONS:
            variant = self.functions.active(function)
            on_model = getattr(self.model, f"{function}_function", None)
            if variant is None or variant.config.xla:
                continue
            if on_model is not variant.fn:
                continue
            variant.probe.pop_traces()
            variant.called = bool(variant.probe.read_new()) or variant.called

    @property
    def counting(self) -> str | None:
        """What counts as a compilation in this fit (`step_log.JIT`,
        `step_log.CLUSTERS`) or None."""
        if self.jit_on:
            return JIT
        return CLUSTERS if self._clustering else None

    def _settle_clustering(self) -> None:
        """Auto-clustering: asked for, on, and which mode wins."""
        jit = self.report.jit
        section, jit.reason, finding = autoclustering.settle(
            self.jit_on, jit.reason
        )
        self.report.clustering = section
        # Its clusters are counted whenever it acts and XLA is off (after
        # a trial too, whichever candidate won).
        self._clustering = section.active
        if finding is not None:
            self.book.add(*finding)

    def _config(self, jit: bool) -> Config:
        model = self.model
        return Config(
            bool(jit),
            int(model.steps_per_execution or 1),
            model.dtype_policy.name,
        )

    def _prepare_functions(self, functions=FUNCTIONS) -> None:
        """(Re)builds the probed step functions if their configuration
        changed; guarded against unsupported ops while XLA is on."""
        config = self._config(self.jit_on)
        # A trial or baseline builds the XLA twin too: share its trace.
        share = self.trial is not None
        for function in functions:
            self.functions.prepare(
                self.model, function, config, self._wrap, share
            )

    def _wrap(self, function: str, fn: Any) -> Any:
        """The fit's wrapper of a step function: the unsupported-op guard
        while XLA is on; if the step raises, the fit is `interrupted`."""
        if self.jit_on:
            fn = self._guard(function, fn)
        run = weakref.ref(self)  # the model must not keep the fit alive
        return on_error(fn, lambda: run() and run().interrupted())

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
        reason, finding = unsupported_lib.fallback(
            ops, self.settings.on_unsupported
        )
        xla_setting.set_xla(self.model, False)
        self.report.jit.enabled = False
        self.report.jit.reason = reason
        self.book.add(*finding)

    @property
    def jit_on(self) -> bool:
        """Whether the step compiles with XLA now, read from the model:
        the one place that holds it (`xla_setting.set_xla` writes it)."""
        return self._configured and bool(self.model.jit_compile)

    # The trial.

    def _start_trial(self, original, spe: int) -> None:
        """The XLA/precision trial, or with `original=None` the no-XLA
        baseline window (the same mechanism; XLA stays on after it)."""
        request = self.settings.trial_request(
            self.jit_on,
            self.params,
            spe,
            self.functions is not None,
            self.report.clustering,
            workers=self.worker.count if self.worker else 1,
        )
        if original is None:
            outcome = auto_runner.plan_baseline(
                self.model, request, ModelState(self.model)
            )
        else:
            outcome = auto_runner.plan(
                self.model, request, original, self.trial_result
            )
        if isinstance(outcome, auto_runner.TrialRunner):
            self.trial = outcome
        else:
            self._settle(outcome, None)

    def _put_side(self, runner, switched: bool) -> None:
        if switched:
            self._prepare_functions(("train",))
        if runner.unknown_length and not runner.active.jit:
            self._count_before = step_count(self.model)

    def _give_back_step_count(self) -> None:
        """The data ended in a no-XLA call of the baseline (an epoch of
        unknown length): Keras's end-of-data call of a train function
        without XLA advanced the optimizer's step count though it trained
        nothing (`auto.runner.plan_baseline`); the count goes back to
        what it was before that call, as training without the tuner
        leaves it."""
        before, self._count_before = self._count_before, None
        if before is None:
            return
        count = self.model.optimizer.iterations
        if int(count.numpy()) != before:
            count.assign(before)
            logger.info("Gave back the end-of-data call's optimizer step.")

    def _finish_trial(self) -> None:
        super()._finish_trial()
        self._prepare_functions()

    def _decided(self, chosen) -> bool:
        return self.jit_on  # the runner put the model in `chosen`'s

    def _jit_settled(self) -> None:
        self._settle_clustering()  # the winner's mode (set_jit may change)

    def _measured(self, measured, chosen) -> None:
        graph = measured.baseline.trace_seconds
        self.accountant.graph_seconds = graph or 0.0

    def _abandoned(self, runner) -> None:
        logging.getLogger("tensorflow").removeFilter(auto_runner.RETRACE_FILTER)

    # Per step.

    def _call_begins(self, function: str, now: float) -> None:
        if self.profile is not None and function == "train":
            self.profile.before_call(self.log.timer.clock_offset + now)

    def _call_ended(self) -> None:
        self._count_before = None  # the call trained: it ended

    # Epochs and validation runs.

    def _start_deferred_baseline(self, epoch: int) -> None:
        """Data of unknown length: the baseline window runs in the second
        epoch, as long as the first (Keras counted it, and ends it
        without an end-of-data call)."""
        baseline, epochs = self.report.baseline, self.report.epochs
        deferred = auto_runner.DEFERRED_REASON
        if epoch != 1 or baseline is None or baseline.reason != deferred:
            return
        if not (self.jit_on and epochs and epochs[0].steps):
            return
        self.params = dict(self.params, steps=epochs[0].steps)
        self._start_trial(None, int(self.model.steps_per_execution or 1))
        if self.trial is not None and self.functions is not None:
            self.trial.trial.epoch = epoch
            self._prepare_functions()

    def _epoch_begins(self, epoch: int) -> None:
        self._start_deferred_baseline(epoch)
        status = self.settings.cache_status
        if status is not None:
            live = status.live_directory
            self._cache_before = cache_lib.cache_entries(live)

    def _taken(self, records) -> None:
        """A validation run or an epoch ended: what the ledger holds now
        is not the next train call's (the guard's look starts here)."""
        if self.guard is not None and self._written is not None:
            self._written = compile_ledger.written()

    def _train_calls_end(self, interrupted: bool) -> None:
        if interrupted:
            self._count_before = None  # a failed call: left as it is
        self._give_back_step_count()

    def _xla_trains(self) -> bool:
        return bool(self.jit_on)

    def _compiled_in_last_call(self) -> int | None:
        """A call long enough to have compiled (the owner's rule) counts
        where XLA's ledger recorded compilations since the last look (one
        listing of it, against 0.6 ms to collect the calls)."""
        if super()._compiled_in_last_call() is None:
            return None
        written = compile_ledger.written()
        if written is None:
            return 0  # no ledger: the calls themselves say
        seen, self._written = self._written, written
        if seen is None:
            return 0  # the first look: what the ledger held is not known
        return written - seen or None

    def _fall_back(self) -> None:
        xla_setting.set_xla(self.model, False)
        if self.functions is not None:
            self._prepare_functions()  # without XLA: compiles nothing

    def _label_cache(self, stats, records) -> None:
        status = self.settings.cache_status
        if status is None or not status.active:
            return
        problem = cache_savings.label_stats(
            self.report, stats, self._cache_before, status
        )
        if problem is not None:
            self.book.add(
                codes.COMPILE_CACHE_NOT_SAVED,
                f"New compile cache entries were not saved to "
                f"{status.directory}: {problem}. Training went on; those "
                "signatures compile again in the next process.",
                f"Free space on the disk of {status.directory}, or point "
                "compile_cache at another disk.",
                (status.directory,),
            )

    def _fingerprint(self, stats, records) -> None:
        """The epoch's train compilations' program fingerprints, from
        their ledger entries (no compilation)."""
        for c in self.report.compile_log:
            if c.function == "train" and c.epoch == stats.epoch:
                c.fingerprint = hlo_analysis.program_fingerprint(c)

    def _check(self, stats, records) -> None:
        s, found = self.settings, []
        if not self._hlo_done and s.analyze_hlo and self.jit_on:
            variant = self.functions and self.functions.active("train")
            hlo, found = epoch_checks.analyze_hlo(
                self.model,
                s,
                stats,
                records,
                variant.hlo_results if variant else {},
                self.report.compile_log,
            )
            self._hlo_done = hlo is not None or bool(found)
            self.report.hlo = hlo or self.report.hlo
        misaligned = epoch_checks.misaligned(self.model, stats, records)
        found += self._lints(stats, misaligned)
        found += epoch_checks.probe_findings(self.functions)
        for code, message, fix in found:
            self.book.add(code, message, fix)

    def _conclude(self, stats, records) -> None:
        if self._clustering:
            clustering = self.report.clustering
            clustering.clusters = dict(self.log.clusters)
            inside, total = self.log.coverage()
            clustering.ops_in_clusters, clustering.step_ops = inside, total
        if self.profile is not None:
            self.profile.count()
        super()._conclude(stats, records)

    # The fit's end.

    def _stop_on_error(self) -> None:
        if self.profile is not None:
            self.profile.abort()

    def _release(self) -> None:
        if self.profile is not None:
            self.profile.finish()
        self.lease.unwatch()
        if self.functions is not None:
            self.functions.unwrap(self.model)

    def _leave_model(self) -> None:
        """Puts back what the tuner switched for the fit (`jit_compile`,
        the precision policy, auto-clustering, the step functions), unless
        the user asked to keep the tuner's choice (`keep`); a trial that
        did not decide chose nothing to keep. The report says which."""
        keep, runner = self.settings.keep, self._abandon_trial()
        try:
            if keep and runner is not None and runner.keep is not None:
                # A baseline window: XLA as the user asked the tuner.
                runner.switch(self.model, runner.keep)
            elif runner is not None:
                keep = False  # an undecided trial chose nothing to keep
            if not keep:
                self.lease.restore()
            self._match_functions()
        except Exception as error:  # noqa: BLE001 - never stop training
            if self.settings.strict:
                raise
            logger.exception("keras_xla: could not put the model back")
            keep = True  # what is true of the model now
            self.book.add(
                codes.TUNER_ERROR,
                "XLATuner could not put the model back as you compiled it: "
                f"{type(error).__name__}: {error}",
                "Please report this with the log; call model.compile() "
                "again to reset its settings.",
                ("restore", type(error).__name__, str(error)),
            )
        if self.report.jit is not None:
            self.report.jit.kept = keep

    def _match_functions(self) -> None:
        """The step functions on the model are those of its settings: a
        variant this fit (or an earlier one) built, else a new one (built,
        not traced: nothing runs until the model is called)."""
        if self.functions is None:
            return
        config = self._config(self.model.jit_compile)
        for function in FUNCTIONS:
            variant = self.functions.active(function)
            if variant is not None and variant.config != config:
                self.functions.prepare(self.model, function, config, None)


def step_count(model: Any) -> int | None:
    """The optimizer's step count (`iterations`), or None without one."""
    optimizer = getattr(model, "optimizer", None)
    count = getattr(optimizer, "iterations", None)
    return None if count is None else int(count.numpy())
