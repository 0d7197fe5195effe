"""A fit on Keras's JAX backend: what `FitOwner` asks of it.

`keras_xla.fit_owner.FitOwner` holds every hook and rule; this adapter
says what is JAX's: the fit's setup, the tap on the step functions and
JAX's own compile events, the train and test functions of each
configuration (on JAX a configuration is a function as well as a model
setting), the persistent cache's labels from those events, and the HLO
checks. Data flows one way: batch -> tap -> step records with JAX's
compile events -> accounting (`core/`) -> epoch statistics -> report,
verdict -> JSON, TensorBoard (without TensorFlow), the summary.
"""

from __future__ import annotations

import os
import time
import weakref
from typing import Any

from keras_xla import precision as precision_lib
from keras_xla import xla_setting
from keras_xla.auto.model_state import ModelState
from keras_xla.auto.policy import AUTO, Candidate
from keras_xla.core import cache_directory, files
from keras_xla.core import findings as codes
from keras_xla.core.guard import signature_key
from keras_xla.core.shape_switch import BucketSwitch, ShapeSwitch
from keras_xla.core.timing import median_seconds, steady_signature
from keras_xla.fit_adapter import FitAdapter, Start
from keras_xla.jax_backend import environment, hlo
from keras_xla.jax_backend.compile_events import CompileEvents
from keras_xla.jax_backend.step_log import JaxStepLog, trackers_of
from keras_xla.jax_backend.tap import FUNCTIONS, StepTap, Taken, untapped

# Step functions built for a model's XLA setting and precision, kept
# across fits so a second fit with the same configuration compiles
# nothing again (a rebuilt `jax.jit` compiles every shape afresh).
_BUILT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
INACTIVE_FIX = "Pass compile_cache a directory you can create."
HLO_FIX = "Nothing to do; pass analyze_hlo=False to skip it."


class JaxFitAdapter(FitAdapter):
    """One fit on JAX (`keras_xla.fit_adapter.FitAdapter`)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.events = CompileEvents()
        self.tap = StepTap(self.events)
        self._user: tuple[Any, Any] = (None, None)
        self._user_state: ModelState | None = None
        # The configuration the fit set up, and its (train, test) functions
        # (Keras's own, unless the tuner changed the configuration).
        self._start: Candidate | None = None
        self._start_functions: tuple[Any, Any] = (None, None)
        # The functions this fit's tap wrapped and put on the model.
        self._tapped: dict[str, Any] = {}
        # The per-shape fallback: per function, the switched function
        # and the XLA one it stands for.
        self._switched: dict[str, tuple[Any, Any]] = {}

    def setup(self) -> Start:
        s, model = self.settings, self.model
        self.events.install()
        self._user = model.train_function, model.test_function
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
        for finding in [
            *environment.tf_only_findings(model, s),
            *environment.precision_findings(model),
        ]:
            self.book.add(*finding)
        self._start = self._configuration()
        if changed or jit_changed or model.train_function is None:
            functions = self._built(self._start.jit, self._start.policy)
            model.train_function, model.test_function = functions
        if model.test_function is None:
            model.make_test_function()
        self._start_functions = (
            untapped(model.train_function),
            untapped(model.test_function),
        )
        if s.cache_status is not None:
            status = s.cache_status
            self.report.compile_cache = cache_directory.start_section(status)
            found = cache_directory.status_findings(status, INACTIVE_FIX)
            for code, message, fix in found:
                self.book.add(code, message, fix)
        spe = int(model.steps_per_execution or 1)
        self.log = JaxStepLog(spe, self.tap, trackers_of(model))
        self.tap.error_handler = self._step_failed
        # At the end of data Keras's JAX trainer stops at `next(iterator)`
        # before any step runs: a baseline over data of unknown length
        # runs in the first epoch.
        return Start(
            devices=environment.device_infos(),
            xla_first=True,
            defers_unknown=False,
        )

    def _configuration(self) -> Candidate:
        """The model's configuration now: XLA on or off, its policy."""
        model = self.model
        jit = bool(model.jit_compile) and not model.run_eagerly
        return Candidate(jit, model.dtype_policy.name)

    # The step functions.

    def build(self, candidates: list) -> None:
        for candidate in candidates:
            if candidate != self._start:
                self._built(candidate.jit, candidate.policy)

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

    def put(self, trial: Any = None, decided: bool = False) -> None:
        """The model's train function for its configuration now (tapped);
        its test function too, but within a trial's windows, where
        validation keeps the fit's own XLA setting."""
        now = self._configuration()
        test_config = (
            Candidate(self._start.jit, now.policy) if trial is not None else now
        )
        put = {"train": self._function(now, 0)}
        put["test"] = self._function(test_config, 1)
        if self.switch is not None:
            put = {f: self._switched[f][0] for f in FUNCTIONS}
            if isinstance(self.switch, BucketSwitch):
                # Tapped inside: the tap sees each side's padded batch.
                for function, fn in put.items():
                    setattr(self.model, f"{function}_function", fn)
                return
        for function, fn in put.items():
            attr, mine = f"{function}_function", self._tapped.get(function)
            on_model = getattr(self.model, attr)
            if on_model is not mine or untapped(on_model) is not fn:
                self._tapped[function] = self.tap.wrap(function, fn)
                setattr(self.model, attr, self._tapped[function])

    def _function(self, candidate: Candidate, which: int) -> Any:
        """The train (0) or test (1) function of `candidate`: the fit's
        own where it is the fit's configuration."""
        if candidate == self._start:
            return self._start_functions[which]
        return self._built(candidate.jit, candidate.policy)[which]

    def switch_shapes(self, bucket: dict | None = None) -> ShapeSwitch | None:
        model = self.model
        if int(model.steps_per_execution or 1) != 1:
            return None
        now = self._configuration()
        plain = Candidate(False, now.policy)
        compiled = {}
        for which, function in enumerate(FUNCTIONS):
            xla = self._function(now, which)
            known = self.log.trackers.of(xla).compiled(function)
            compiled[function] = {signature_key(s) for s in known}
            sides = (xla, self._function(plain, which))
            if bucket is not None:
                sides = tuple(self.tap.wrap(function, f) for f in sides)
            self._switched[function] = (self._switch(function, *sides), xla)
        self.switch = self._switch_of(compiled, bucket)
        self.put(None)
        return self.switch

    def _switch(self, function: str, xla: Any, plain: Any) -> Any:
        """Keras's `<function>_function` that takes the call's batch and
        hands it to XLA's function where XLA compiled its shapes (padded
        first, for buckets), else to the one without XLA. Per shape it is
        tapped as one function (the tap sees the batch and its wait); for
        buckets each side is (the tap sees the padded batch, and the wait
        the switch measured, `Taken`)."""

        def switched(state, iterator):
            waited = [0.0]

            def take():
                asked = time.perf_counter()
                data = next(iterator)
                waited[0] = time.perf_counter() - asked
                return data

            return self.switch.dispatch(
                function,
                take,
                lambda data, varies: xla(state, Taken(data, waited[0])),
                lambda data, varies: plain(state, Taken(data, waited[0])),
            )

        return switched

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

    # The epoch's checks.

    def epoch_checks(self, interrupted: bool) -> list:
        return [self.label_cache, self.unreadable_batches]

    def label_cache(self, stats, records) -> list:
        """The epoch's cache hits and misses, from JAX's events."""
        section = self.report.compile_cache
        hits, misses = self.log.cache
        self.log.cache = [0, 0]
        if section is None or not section.active:
            return []
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
        return []

    def programs(self, compilations: list) -> None:
        """Each train compilation's program fingerprint and memory, lowered
        again from a batch of its shapes the tap kept (JAX's caches: no
        compilation); one compiled on the no-XLA side of a window waits
        for XLA's."""
        jitted = hlo.jitted_step(self.model)
        state = jitted and hlo.state_specs(self.model)
        if state is None:
            return
        for c in compilations:
            if c.function != "train" or c.fingerprint is not None:
                continue
            for sig, data in self.tap.examples.items():
                dtypes = {t.path: t.dtype for t in sig.tensors}
                if c.shapes == sig.shapes() and c.dtypes in (None, dtypes):
                    program = hlo.program(jitted, state, data)
                    c.fingerprint, c.program_bytes = program
                    break

    def analyze_hlo(self, stats, records) -> list:
        """The train step's HLO from JAX's in-memory cache, at the epoch's
        steady signature, from a batch of it the tap kept; an analysis
        that compiles the step again is counted apart from training's.
        (The tensor-core alignment lint is not run on JAX: it reads the
        GPUs through TensorFlow.)"""
        sig = steady_signature(records)
        jitted = hlo.jitted_step(self.model)
        data = self.tap.examples.get(sig) if sig is not None else None
        if jitted is None or data is None:
            off = (
                codes.HLO_ANALYSIS_OFF,
                "The HLO analysis found no jitted train step (or no batch of "
                "its steady shapes) on the model.",
                HLO_FIX,
            )
            return [off]
        before = self.events.pending("train")
        shapes = sig.shapes()
        try:
            section, text = hlo.analyze(
                jitted, hlo.state_specs(self.model), data, stats.epoch, shapes
            )
            if self.settings.log_dir:
                # Written with the fit's other outputs (their failures are
                # theirs, reported as `output-failed`).
                path = os.path.join(self.settings.log_dir, hlo.TEXT_PATH)
                section.text = files.write_later(path, text)
        except Exception as error:  # noqa: BLE001 - a diagnostic
            failed = (
                codes.HLO_ANALYSIS_FAILED,
                f"The HLO analysis failed: {type(error).__name__}: {error}",
                HLO_FIX,
            )
            return [failed]
        extra = self.events.take("train")[before:]
        if extra:
            section.source = "compiled again"
            self.report.outside_compilations.append(
                {
                    "function": "train",
                    "shapes": shapes,
                    "compilations": len(extra),
                    "found": "the HLO analysis",
                }
            )
        hlo.add_rates(
            section,
            stats.step_time_ms["median"],
            self.settings.peak_flops,
            self.model.dtype_policy.compute_dtype,
        )
        self.report.hlo = section
        return []

    def unreadable_batches(self, stats, records) -> list:
        unreadable, self.tap.unreadable = self.tap.unreadable, []
        if not unreadable:
            return []
        return [
            (
                codes.TUNER_ERROR,
                f"{len(unreadable)} batches' shapes could not be read "
                f"({unreadable[0]}); their steps are timed, not explained.",
                "Please report this with the batch structure; training "
                "went on.",
            )
        ]

    # The fit's end.

    def give_back(self, keep: bool, interrupted: bool) -> None:
        """JAX's events unheard, the step functions untapped; the user's
        configuration (XLA, precision) and step functions back unless
        `keep`."""
        self.events.remove()
        model = self.model
        model.train_function = untapped(model.train_function)
        model.test_function = untapped(model.test_function)
        for function, (switched, xla) in self._switched.items():
            attr = f"{function}_function"
            if getattr(model, attr) is switched:
                setattr(model, attr, xla)  # the switch was the fit's
        if keep:
            return
        if model.optimizer is not self._user_state.optimizer:
            model.jax_state_sync()  # into the variables both share
        self._user_state.restore(model)
        model.train_function, model.test_function = self._user
