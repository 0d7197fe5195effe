"""A fit on Keras's TensorFlow backend: what `FitOwner` asks of it.

`keras_xla.fit_owner.FitOwner` holds every hook and rule; this adapter
says what is TensorFlow's: the fit's setup (`fit_setup`), the probed
step functions (one per configuration, guarded against ops without an
XLA kernel), auto-clustering, the profile window, the mirrored compile
cache's labels, the HLO checks, and what the fit borrows of the model
(`ModelLease`). Data flows one way: batch -> probe -> step records ->
accounting -> epoch statistics -> report -> summaries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from keras_xla import xla_setting
from keras_xla.core import findings as codes
from keras_xla.core import lints
from keras_xla.core.guard import signature_key
from keras_xla.core.interrupts import on_error
from keras_xla.core.shape_switch import ShapeSwitch
from keras_xla.fit_adapter import FitAdapter, Start
from keras_xla.tf_backend import (
    autoclustering,
    batch_feed,
    cache_savings,
    epoch_checks,
    fit_setup,
    hlo_analysis,
)
from keras_xla.tf_backend import compile_cache as cache_lib
from keras_xla.tf_backend import jit as jit_lib
from keras_xla.tf_backend import unsupported as unsupported_lib
from keras_xla.tf_backend.batch_feed import BatchFeeds
from keras_xla.tf_backend.model_lease import ModelLease
from keras_xla.tf_backend.profiler import ProfileRun
from keras_xla.tf_backend.step_functions import (
    FUNCTIONS,
    Config,
    StepFunctions,
)
from keras_xla.tf_backend.step_log import CLUSTERS, JIT, StepLog


class TFFitAdapter(FitAdapter):
    """One fit on TensorFlow (`keras_xla.fit_adapter.FitAdapter`)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.log: StepLog | None = None
        self.functions: StepFunctions | None = None
        self.lease: ModelLease | None = None
        self.profile: ProfileRun | None = None
        if self.settings.profile_steps is not None:
            self.profile = ProfileRun(self.settings, self.report, self.book)
        self._configured = False  # jit_compile applied to the model
        self._clustering = False
        self._cache_before: dict[str, float] = {}
        # The per-shape fallback: the functions without XLA, the feeds.
        self._plain: dict[str, Any] = {}
        self._feeds = BatchFeeds()

    def setup(self) -> Start:
        s, model = self.settings, self.model
        self.lease = ModelLease(model)
        setup = fit_setup.configure(s, model)
        report = self.report
        report.environment, report.jit = setup.environment, setup.jit
        report.compile_cache = setup.compile_cache or report.compile_cache
        for code, message, fix, place in setup.findings:
            self.book.add(code, message, fix, place)
        self._configured = True
        # Unsupported ops looked for before training: custom layers only
        # (Keras's own layers declare `supports_jit`).
        if self.jit_on and unsupported_lib.has_custom_layers(model):
            ops = unsupported_lib.preflight(model)
            if ops:
                self._handle_unsupported(ops)
        self._settle_clustering()
        native = getattr(model, "_keras_xla_native_probe", False)
        if native or jit_lib.replicas_in_sync(model) == 1:
            self.functions = StepFunctions.of(model)
            self._forget_plain_steps()
        self.lease.watch(self.interrupted)
        self._note_cache()
        return Start(probed=self.functions is not None)

    def _forget_plain_steps(self) -> None:
        """Steps the model's no-XLA step functions ran since the last fit
        (the user's `evaluate`, `predict` or `fit` on the functions it was
        left with) compiled nothing: their probe's records are dropped, so
        the owner does not report them as XLA's compilations."""
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
    def jit_on(self) -> bool:
        """Whether the step compiles with XLA now, read from the model
        (`xla_setting.set_xla` writes it)."""
        return self._configured and bool(self.model.jit_compile)

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

    # The step functions.

    def build(self, candidates: list) -> None:
        """Nothing ahead: a configuration's functions are built when
        first put on the model (tracing at their first call)."""

    def put(self, trial: Any = None, decided: bool = False) -> None:
        if decided:
            self._settle_clustering()  # the winner's mode (set_jit)
        if self.functions is not None:
            # A trial or baseline builds the XLA twin too: share its
            # trace. Within its windows only the train step switches.
            functions = ("train",) if trial is not None else FUNCTIONS
            config = self._config(self.jit_on)
            for function in functions:
                self.functions.prepare(
                    self.model, function, config, self._wrap, trial is not None
                )
        if self.log is None:
            self.log = StepLog(self)
        # Keras's end-of-data call of a train function without XLA, in a
        # baseline over data of unknown length, still counts a step.
        unknown = trial is not None and trial.unknown_length
        self.log.count_steps = unknown and not self.jit_on

    def _config(self, jit: bool) -> Config:
        model = self.model
        return Config(
            bool(jit),
            int(model.steps_per_execution or 1),
            model.dtype_policy.name,
        )

    def _wrap(self, function: str, fn: Any) -> Any:
        """The fit's wrapper of a step function: the unsupported-op guard
        while XLA is on, and the per-shape switch once the guard put it;
        if the step raises, the fit is `interrupted`."""
        if self.jit_on:
            fn = self._guard(function, fn)
            if self.switch is not None:
                fn = self._switched(function, fn, self._plain[function])
        return on_error(fn, self.interrupted)

    # The per-shape fallback.

    def switch_shapes(self, bucket: dict | None = None) -> ShapeSwitch | None:
        model, functions = self.model, self.functions
        if functions is None or int(model.steps_per_execution or 1) != 1:
            return None
        compiled = {}
        for function in FUNCTIONS:
            variant = functions.active(function)
            xla = variant is not None and variant.config.xla
            known = variant.tracker.compiled(function) if xla else []
            compiled[function] = {signature_key(s) for s in known}
        xla_setting.set_xla(model, False)
        try:  # the functions without XLA, built once per model
            for function in FUNCTIONS:
                functions.prepare(model, function, self._config(False), None)
                self._plain[function] = functions.active(function).fn
        finally:
            xla_setting.set_xla(model, True)
        self.switch = self._switch_of(compiled, bucket)
        self.log.ran_xla = self.switch.knows
        self.put(None)
        return self.switch

    def _switched(self, function: str, xla: Any, plain: Any) -> Any:
        """Keras's `<function>_function` that takes the call's batch and
        hands it, through a feed of the same element spec
        (`batch_feed`), to XLA's function where XLA compiled its shapes,
        else to the one without XLA."""
        switch, feeds = self.switch, self._feeds

        def switched(iterator):
            if not hasattr(iterator, "element_spec"):
                return xla(iterator)  # not Keras's tf.data iterator

            def fed(data, varies):
                spec = iterator.element_spec
                if varies is not None:  # a padded batch: its own spec
                    spec = batch_feed.spec_of(data, varies)
                return feeds.of(spec).holding(data)

            return switch.dispatch(
                function,
                lambda: next(iterator),
                lambda data, varies: xla(fed(data, varies)),
                lambda data, varies: plain(fed(data, varies)),
            )

        return switched

    # Unsupported ops.

    def _guard(self, function: str, fn: Any) -> Any:
        def fall_back(ops):
            self._handle_unsupported(ops)
            self.put()
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

    # The epoch's checks.

    def epoch_checks(
        self, interrupted: bool
    ) -> list[Callable[[Any, list], list]]:
        alignment = [] if interrupted else [self.alignment]
        return [self.label_cache, *alignment, self.clusters_and_profile]

    def _note_cache(self) -> None:
        status = self.settings.cache_status
        if status is not None:
            self._cache_before = cache_lib.cache_entries(status.live_directory)

    def label_cache(self, stats, records) -> list:
        """Each compilation of the epoch a cache hit or miss, by the
        mirrored cache's new entries."""
        status = self.settings.cache_status
        if status is None or not status.active:
            return []
        problem = cache_savings.label_stats(
            self.report, stats, self._cache_before, status
        )
        self._note_cache()
        if problem is None:
            return []
        return [
            (
                codes.COMPILE_CACHE_NOT_SAVED,
                f"New compile cache entries were not saved to "
                f"{status.directory}: {problem}. Training went on; those "
                "signatures compile again in the next process.",
                f"Free space on the disk of {status.directory}, or point "
                "compile_cache at another disk.",
            )
        ]

    def programs(self, compilations: list) -> None:
        """Each train compilation's program fingerprint and memory, from
        its ledger entry (no compilation)."""
        for c in compilations:
            if c.function == "train" and c.fingerprint is None:
                c.fingerprint, c.program_bytes = hlo_analysis.program(c)

    def analyze_hlo(self, stats, records) -> list:
        variant = self.functions and self.functions.active("train")
        hlo, found = epoch_checks.analyze_hlo(
            self.model,
            self.settings,
            stats,
            records,
            variant.hlo_results if variant else {},
            self.report.compile_log,
        )
        self.report.hlo = hlo or self.report.hlo
        return found

    def alignment(self, stats, records) -> list:
        """Tensor-core alignment (the first epoch) and the probe's
        folded dimensions."""
        found = epoch_checks.probe_findings(self.functions)
        misaligned = epoch_checks.misaligned(self.model, stats, records)
        aligned = lints.tensor_core_alignment(misaligned)
        if aligned is not None:
            found.insert(0, (codes.TENSOR_CORE_ALIGNMENT, *aligned))
        return found

    def clusters_and_profile(self, stats, records) -> list:
        """Auto-clustering's clusters and coverage; the profile window's
        count of the tuner's compilations."""
        if self._clustering:
            clustering = self.report.clustering
            clustering.clusters = dict(self.log.clusters)
            inside, total = self.log.coverage()
            clustering.ops_in_clusters, clustering.step_ops = inside, total
        if self.profile is not None:
            self.profile.count()
        return []

    # The fit's end.

    def give_back(self, keep: bool, interrupted: bool) -> None:
        """The profile window stops, the watch on Keras's calls and the
        fit's wrappers come off; then the user's settings (`jit_compile`,
        the precision policy, auto-clustering) unless `keep`, and the
        step functions of the model's settings."""
        try:
            if self.profile is not None:
                (self.profile.abort if interrupted else self.profile.finish)()
        finally:
            self.lease.unwatch()
            if self.functions is not None:
                self.functions.unwrap(self.model)
            self._feeds.close()
        if not keep:
            self.lease.restore()
        # The step functions on the model are those of its settings: a
        # variant this fit (or an earlier one) built, else a new one
        # (built, not traced: nothing runs until the model is called).
        if self.functions is None:
            return
        config = self._config(self.model.jit_compile)
        for function in FUNCTIONS:
            variant = self.functions.active(function)
            if variant is not None and variant.config != config:
                self.functions.prepare(self.model, function, config, None)
