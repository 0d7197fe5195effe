"""FitRun: the owner of a `fit` on Keras's JAX backend.

`keras_xla.fit_owner.FitOwner` holds every hook; this adds what is
JAX's: the fit's setup, the tap on the step functions and JAX's own
compile events, the train functions of each candidate (a candidate is a
train function as well as a model setting), the persistent cache's
labels from those events, and the HLO checks. Data flows one way: batch
-> tap -> step records with JAX's compile events -> accounting (`core/`)
-> epoch statistics -> report, verdict -> JSON, TensorBoard (without
TensorFlow), the summary.
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from typing import Any

from keras_xla import precision as precision_lib
from keras_xla import xla_setting
from keras_xla.auto import runner as auto_runner
from keras_xla.auto.model_state import ModelState
from keras_xla.auto.policy import AUTO, Candidate
from keras_xla.auto.runner import Decided
from keras_xla.core import cache_directory
from keras_xla.core import findings as codes
from keras_xla.core import report as report_lib
from keras_xla.core.timing import median_seconds
from keras_xla.fit_owner import FitOwner
from keras_xla.jax_backend import baseline as baseline_lib
from keras_xla.jax_backend import environment, epoch_checks, hlo
from keras_xla.jax_backend.compile_events import CompileEvents
from keras_xla.jax_backend.step_log import JaxStepLog, trackers_of
from keras_xla.jax_backend.summaries import JaxSummaryWriter
from keras_xla.jax_backend.tap import StepTap, untapped
from keras_xla.jax_backend.trial import JaxRunner, JaxTrialRunner

logger = logging.getLogger(__name__)

# Step functions built for a model's XLA setting and precision, kept
# across fits so a second fit with the same configuration compiles
# nothing again (a rebuilt `jax.jit` compiles every shape afresh).
_BUILT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
INACTIVE_FIX = "Pass compile_cache a directory you can create."


class FitRun(FitOwner):
    """The state of one `fit` on JAX (`FitOwner`'s hooks).

    Args:
        settings: The tuner's checked arguments.
        model: The model being fit.
        params: Keras's callback params (`steps`, `epochs`).
        previous_trial: Unused on JAX (each fit's trial runs again);
            passed through as `trial_result`.
    """

    summary_writer = JaxSummaryWriter  # TensorBoard without TensorFlow

    def __init__(
        self,
        settings: Any,
        model: Any,
        params: dict | None,
        previous_trial: tuple | None = None,
    ) -> None:
        super().__init__(settings, model, params, previous_trial)
        self.events = CompileEvents()
        self.tap = StepTap(self.events)
        self.log: JaxStepLog | None = None
        # The baseline's windows, or `jit_compile="auto"`'s trial.
        self.trial: JaxRunner | None = None
        self._user: dict[str, Any] = {}
        self._user_state: ModelState | None = None
        # The configuration the fit set up, and its train function
        # (Keras's own, unless the tuner changed the configuration).
        self._start: Candidate | None = None
        self._start_train = None
        self._start_test = None
        self._hlo_done = False
        self._epoch_cache = [0, 0]  # hits, misses

    # The fit's start and end.

    def begin(self) -> None:
        s, model = self.settings, self.model
        self.events.install()
        self._user = {
            "train_function": model.train_function,
            "test_function": model.test_function,
        }
        self._user_state = ModelState(model)
        changed = False
        if s.mixed_precision not in (None, AUTO):
            wanted = precision_lib.float_policy(s.mixed_precision).name
            if model.dtype_policy.name != wanted:
                precision_lib.apply_policy(model, wanted)
                changed = True
        self.report.environment = environment.describe_environment(model)
        # "auto" asks for XLA on, as on TensorFlow: the trial turns it off
        # where it loses.
        requested = True if s.jit_compile == AUTO else s.jit_compile
        info, finding, jit_changed = environment.configure_jit(model, requested)
        info.requested = s.jit_compile
        self.report.jit = info
        if finding is not None:
            if s.strict and s.jit_compile is True:
                raise ValueError(f"XLA cannot be enabled: {finding[1]}")
            self.book.add(*finding)
        for code, message, fix, place in environment.tf_only_findings(model, s):
            self.book.add(code, message, fix, place)
        for code, message, fix, place in environment.precision_findings(model):
            self.book.add(code, message, fix, place)
        self._start = self._configuration()
        jit = self._start.jit
        if changed or jit_changed or model.train_function is None:
            functions = self._built(bool(model.jit_compile), self._start.policy)
            model.train_function, model.test_function = functions
        if model.test_function is None:
            model.make_test_function()
        self._start_test = model.test_function
        if s.cache_status is not None:
            self._start_cache(s.cache_status)
        spe = int(model.steps_per_execution or 1)
        self.log = JaxStepLog(spe, self.tap, trackers_of(model))
        self.tap.error_handler = self._step_failed
        self._start_train = untapped(model.train_function)
        auto = AUTO in (s.jit_compile, s.mixed_precision)
        if auto:
            self._plan_trial(spe)
        if not auto or (jit and self._trial_skipped()):
            # XLA trains: its verdict needs the no-XLA baseline.
            self._plan_baseline(spe)
        model.train_function = self.tap.wrap("train", model.train_function)
        model.test_function = self.tap.wrap("test", model.test_function)
        self.active = True

    def _plan_baseline(self, spe: int) -> None:
        """The no-XLA baseline's runner (`self.trial`), or the report's
        section saying why there is none."""
        s, model = self.settings, self.model
        planned = baseline_lib.plan(
            bool(s.baseline),
            self._start.jit,
            self.params.get("steps"),
            spe,
            self.params.get("epochs"),
            s.trial_budget,
            model,
            ModelState(model),
            workers=self.worker.count if self.worker else 1,
        )
        if isinstance(planned, report_lib.BaselineSection):
            self.report.baseline = planned
            return
        try:
            self._built(False, self._start.policy)
        except Exception as error:  # noqa: BLE001
            self.report.baseline = report_lib.BaselineSection(
                reason=f"the no-XLA step could not be built: {error}"
            )
            return
        self.trial = planned

    def _plan_trial(self, spe: int) -> None:
        """`jit_compile="auto"` or `mixed_precision="auto"`: the trial's
        runner (`self.trial`), planned by `auto.runner.plan` as on
        TensorFlow, or its decision at once (one candidate, or skipped:
        the fit's own configuration trains)."""
        model, start = self.model, self._start
        request = dataclasses.replace(
            self.settings.trial_request(
                start.jit,
                self.params,
                spe,
                True,
                workers=self.worker.count if self.worker else 1,
            ),
            devices=environment.device_infos(),
            first_jit=start.jit,  # Keras's jitted step: the fit's own
        )
        planned = auto_runner.plan(
            model,
            request,
            self._user_state,
            self.trial_result,
            runner_type=lambda trial, original: JaxTrialRunner(
                trial, original, start
            ),
            current=start,
        )
        if isinstance(planned, Decided):
            chosen = start if planned.skipped else self._configuration()
            self._settle(planned, chosen)
            return
        try:
            for candidate in planned.trial.candidates:
                self._built(candidate.jit, candidate.policy)
        except Exception as error:  # noqa: BLE001
            _, decision = planned.trial.decide()
            problem = f"a candidate's step could not be built: {error}"
            fix = "Pass jit_compile and mixed_precision without 'auto'."
            settled = planned.settle(model, None, decision, (problem, fix))
            self._settle(settled, start)
            return
        self._put_functions(planned.active)
        self.trial = planned

    def _configuration(self) -> Candidate:
        """The model's configuration now: XLA on or off, its policy."""
        model = self.model
        jit = bool(model.jit_compile) and not model.run_eagerly
        return Candidate(jit, model.dtype_policy.name)

    def _decided(self, chosen: Candidate) -> bool:
        self._put_functions(chosen)
        return chosen.jit

    def _measured(self, measured, chosen: Candidate) -> None:
        self._put_functions(chosen)  # XLA's, as the runner left the model

    def _abandoned(self, runner) -> None:
        chosen = runner.keep or self._start
        runner.switch(self.model, chosen)
        self._put_functions(chosen)

    def _built(self, jit: bool, policy: str) -> tuple[Any, Any]:
        """Keras's train and test functions for the model with XLA `jit`
        in precision `policy`, built once per model and configuration and
        reused by later fits. Building compiles nothing: a jitted step
        traces at its first call, in the layers' policies then (the
        trial's `switch` puts the model in a candidate's before its
        function runs)."""
        model = self.model
        key = (jit, int(model.steps_per_execution or 1), policy)
        try:
            built = _BUILT.setdefault(model, {})
        except TypeError:
            built = {}
        if key not in built:
            own = model.train_function, model.test_function, model.jit_compile
            try:
                xla_setting.set_xla(model, jit)
                model.make_train_function(force=True)
                model.make_test_function(force=True)
                built[key] = (model.train_function, model.test_function)
            finally:
                model.train_function, model.test_function = own[:2]
                xla_setting.set_xla(model, own[2])
        return built[key]

    def _put_functions(self, candidate: Candidate) -> None:
        """`candidate`'s train function on the model (tapped), and the
        test function of its precision (with the fit's XLA setting)."""
        model, start = self.model, self._start
        if candidate == start:
            train = self._start_train
        else:
            train = self._built(candidate.jit, candidate.policy)[0]
        if candidate.policy == start.policy:
            test = untapped(self._start_test)
        else:
            test = self._built(start.jit, candidate.policy)[1]
        if untapped(model.train_function) is not train:
            model.train_function = self.tap.wrap("train", train)
        if untapped(model.test_function) is not test:
            model.test_function = self.tap.wrap("test", test)

    def _start_cache(self, status) -> None:
        self.report.compile_cache = cache_directory.start_section(status)
        found = cache_directory.status_findings(status, INACTIVE_FIX)
        for code, message, fix in found:
            self.book.add(code, message, fix)

    def _release(self) -> None:
        self.events.remove()

    def _leave_model(self) -> None:
        """The step functions untapped; the user's configuration (XLA,
        precision) and step functions back unless `keep`."""
        model = self.model
        model.train_function = untapped(model.train_function)
        model.test_function = untapped(model.test_function)
        keep = bool(self.settings.keep)
        if not keep and self._user_state is not None:
            if model.optimizer is not self._user_state.optimizer:
                model.jax_state_sync()  # into the variables both share
            self._user_state.restore(model)
            model.train_function = self._user["train_function"]
            model.test_function = self._user["test_function"]
        if self.report.jit is not None:
            self.report.jit.kept = keep

    def _stop_on_error(self) -> None:
        self.log.wait = False  # a call's batch end may never come

    def _step_failed(self, function: str, error: Exception) -> None:
        """A step function raised inside the fit: the indivisible batch
        of a `keras.distribution` gets its finding and fix."""
        if "Indivisible" in type(error).__name__ or "divisible" in str(error):
            devices = environment.device_count()
            self.book.add(
                codes.INDIVISIBLE_BATCH,
                f"{function}: a batch does not divide over the {devices} "
                "devices of the keras.distribution, so Keras's data "
                f"iterator failed ({type(error).__name__}: {error}). A "
                "partial last batch is the usual cause.",
                "Make every batch a multiple of the device count: batch "
                "with drop_remainder=True, or pick a dataset size and "
                f"batch size divisible by {devices}.",
                (function,),
            )

    # Per step.

    def _put_side(self, runner, switched: bool) -> None:
        """The runner's side trains the call: its train function goes on
        the model."""
        self._put_functions(runner.active)

    # Epochs and validation runs.

    def _epoch_begins(self, epoch: int) -> None:
        self._epoch_cache = [0, 0]

    def _xla_trains(self) -> bool:
        return bool(self.report.jit and self.report.jit.enabled)

    def _compiled_in_last_call(self) -> int | None:
        """Whether the last train call compiled, as JAX's events say (the
        tap counts other functions' compilations per call: 0)."""
        calls = self.tap.calls["train"]
        return 0 if calls and calls[-1].events else None

    def _fall_back(self) -> None:
        """Train and test functions without XLA, of the model's precision
        (built once per model, as the baseline's)."""
        model = self.model
        xla_setting.set_xla(model, False)
        train, test = self._built(False, model.dtype_policy.name)
        model.train_function = self.tap.wrap("train", train)
        model.test_function = self.tap.wrap("test", test)

    def _taken(self, records) -> None:
        """The records' cache hits and misses count in the epoch."""
        self._epoch_cache[0] += sum(r.cache_hits for r in records)
        self._epoch_cache[1] += sum(len(r.new) for r in records)

    def _label_cache(self, stats, records) -> None:
        section = self.report.compile_cache
        if section is None or not section.active:
            return
        hits, misses = self._epoch_cache
        stats.compile_cache_hits, stats.compile_cache_misses = hits, misses
        section.hits += hits
        section.misses += misses
        for compilation in self.report.compile_log:
            if compilation.epoch == stats.epoch and compilation.cache is None:
                compilation.cache = "miss"
        hit_s = [r.hit_seconds / r.cache_hits for r in records if r.cache_hits]
        if hit_s:
            section.hit_median_seconds = median_seconds(hit_s)
        compiled = [c.compile_seconds for c in self.report.compile_log]
        if compiled:
            section.miss_median_seconds = median_seconds(compiled)

    def _fingerprint(self, stats, records) -> None:
        """Each train compilation's program fingerprint, lowered again from
        a batch of its shapes the tap kept (JAX's caches: no compilation);
        one compiled on the no-XLA side of a window waits for XLA's."""
        jitted = hlo.jitted_step(self.model)
        if jitted is None:
            return
        state = None
        for c in self.report.compile_log:
            if c.function != "train" or c.fingerprint is not None:
                continue
            data = next(
                (
                    example
                    for sig, example in self.tap.examples.items()
                    if c.shapes == {t.path: list(t.shape) for t in sig.tensors}
                    and c.dtypes
                    in (None, {t.path: t.dtype for t in sig.tensors})
                ),
                None,
            )
            if data is None:
                continue
            if state is None:
                sharded = environment.device_count() > 1
                state = hlo.state_specs(self.model, sharded)
            c.fingerprint = hlo.fingerprint(jitted, state, data)

    def _check(self, stats, records) -> None:
        """The epoch's checks (`epoch_checks`): the HLO analysis once per
        fit, then the epoch lints."""
        s, runner = self.settings, self.trial
        found = []
        # Not while the baseline's (or the trial's) no-XLA side is on the
        # model: its step is not jitted (the analysis waits for an epoch
        # that ends with XLA's, as on TensorFlow).
        xla_now = runner is None or runner.active is None or runner.active.jit
        if (
            not self._hlo_done
            and s.analyze_hlo
            and self.report.jit.enabled
            and xla_now
        ):
            self._hlo_done = True
            check = epoch_checks.analyze_hlo(
                self.model, s, stats, records, self.tap.examples, self.events
            )
            if check.section is not None:
                self.report.hlo = check.section
            if check.outside is not None:
                self.report.outside_compilations.append(check.outside)
            found += check.findings
        found += self._lints(stats)
        for code, message, fix in found:
            self.book.add(code, message, fix)

    def _conclude(self, stats, records) -> None:
        unreadable, self.tap.unreadable = self.tap.unreadable, []
        if unreadable:
            self.book.add(
                codes.TUNER_ERROR,
                f"{len(unreadable)} batches' shapes could not be read "
                f"({unreadable[0]}); their steps are timed, not explained.",
                "Please report this with the batch structure; training "
                "went on.",
                ("tap",),
            )
        super()._conclude(stats, records)
