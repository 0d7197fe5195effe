"""The fit's owner driven on a stub model and a stub backend: its rules
(when checks run, what the backend is asked, what a failure costs),
without a fit."""

import dataclasses

import pytest

from keras_xla.cli.tuner_flags import tuner_parameters
from keras_xla.core import findings as codes
from keras_xla.core.report import JitInfo
from keras_xla.core.signatures import Signature, TensorSignature
from keras_xla.core.timing import StepRecord
from keras_xla.fit_adapter import FitAdapter, Start
from keras_xla.fit_owner import FitOwner
from keras_xla.settings import ARGUMENTS, Settings

# XLATuner's defaults (read from its source: no Keras imported here).
DEFAULTS = {n: p.default for n, p in tuner_parameters().items()}
DEFAULTS["log_dir"] = None


def settings(**given):
    arguments = {**DEFAULTS, "baseline": False, **given}
    return Settings.checked(**{n: arguments[n] for n in ARGUMENTS})


@dataclasses.dataclass
class Policy:
    name: str = "float32"


@dataclasses.dataclass
class StubModel:
    """What the owner reads of a model."""

    jit_compile: bool = True
    run_eagerly: bool = False
    steps_per_execution: int = 1
    dtype_policy: Policy = dataclasses.field(default_factory=Policy)


def record(step, seconds=0.01, new=()):
    sig = Signature(0, (TensorSignature("x", (8, 4), "float32"),))
    r = StepRecord("train", step, seconds, signatures=[(sig,)])
    r.new = list(new)
    return r


class StubLog:
    """A step log whose calls are the ones the test planted."""

    def __init__(self, calls=()):
        self.pending = list(calls)
        self.calls, self.aborted = [], False

    def begin(self, function, batch, now):
        self.calls.append(("begin", function, batch))

    def complete(self, function, step, now):
        self.calls.append(("complete", function, step))

    def close(self, now=None):
        pass

    def collect(self, function, next_step=None):
        return list(self.pending) if function == "train" else []

    def take(self, function):
        if function != "train":
            return []
        taken, self.pending = self.pending, []
        return taken

    def drain(self, when):
        return []

    def compilations(self, long_call):
        return None

    def abort(self):
        self.aborted = True


class StubAdapter(FitAdapter):
    """Records what the owner asks of a backend."""

    calls = ()  # the records each epoch's log holds

    def __init__(self, *args):
        super().__init__(*args)
        self.asked = []

    def setup(self):
        self.asked.append("setup")
        self.report.jit = JitInfo(True, self.model.jit_compile, "on")
        self.log = StubLog(self.calls)
        return Start()

    def build(self, candidates):
        self.asked.append("build")

    def put(self, trial=None, decided=False):
        self.asked.append(("put", trial is not None, decided))

    def analyze_hlo(self, stats, records):
        self.asked.append("analyze_hlo")
        self.analyzed = records
        return []

    def programs(self, compilations):
        self.asked.append("programs")

    def epoch_checks(self, interrupted):
        def label_cache(stats, records):
            self.asked.append(("epoch_checks", interrupted))
            return []

        return [label_cache]

    def give_back(self, keep, interrupted):
        self.asked.append(("give_back", keep, interrupted))


def owner(model=None, params=None, **given):
    class Planted(StubAdapter):
        calls = [record(0, 0.5, new=[(0, 0)]), record(1), record(2)]

    fit = FitOwner(
        settings(**given),
        model or StubModel(),
        params or {"steps": 3, "epochs": 2},
        adapter=Planted,
    )
    fit.begin()
    return fit


def test_the_backend_is_asked_in_order_and_the_hlo_analysis_once():
    fit = owner(analyze_hlo=True)
    for epoch in (0, 1):
        fit.epoch_begin(epoch)
        for step in range(3):
            fit.step_begin("train", step)
            fit.step_end("train", step)
        fit.epoch_end(epoch)
        fit.adapter.log.pending = [record(0), record(1), record(2)]
    fit.end()
    asked = fit.adapter.asked
    # Set up, its step functions put on (no trial), then each epoch's
    # checks: its compilations' programs (the first epoch compiled), the
    # HLO analysis until it gave a section or said why not (the stub says
    # nothing: it is asked again), then the model back.
    assert asked[:2] == ["setup", ("put", False, False)]
    assert asked[2:] == [
        "programs",
        "analyze_hlo",
        ("epoch_checks", False),
        "analyze_hlo",
        ("epoch_checks", False),
        ("give_back", False, False),
    ]
    assert [e.steps for e in fit.report.epochs] == [3, 3]
    assert fit.report.epochs[0].compilations == 1
    assert fit.report.jit.kept is False


def test_xla_off_gets_no_hlo_analysis_and_keep_is_passed_on():
    fit = owner(StubModel(jit_compile=False), keep=True)
    fit.epoch_begin(0)
    fit.epoch_end(0)
    fit.end()
    assert "analyze_hlo" not in fit.adapter.asked
    assert fit.adapter.asked[-1] == ("give_back", True, False)
    assert fit.report.jit.kept is True


def test_an_interrupted_fit_stops_waiting_and_costs_no_checks():
    fit = owner()
    fit.epoch_begin(0)
    fit.step_begin("train", 0)
    fit.interrupted()
    asked = fit.adapter.asked
    assert fit.adapter.log.aborted
    assert ("epoch_checks", True) in asked and "analyze_hlo" not in asked
    assert asked[-1] == ("give_back", False, True)
    assert not fit.active
    fit.end()  # once ended, a second end does nothing
    assert asked.count(("give_back", False, True)) == 1


@pytest.mark.parametrize("strict", [False, True])
def test_a_backend_that_cannot_give_the_model_back(strict):
    class Failing(StubAdapter):
        def give_back(self, keep, interrupted):
            raise RuntimeError("stuck")

    fit = FitOwner(
        settings(strict=strict), StubModel(), {"steps": 1}, adapter=Failing
    )
    fit.begin()
    if strict:
        with pytest.raises(RuntimeError, match="stuck"):
            fit.end()
        return
    fit.end()  # never raised into training
    assert codes.TUNER_ERROR in fit.report.finding_codes()
    assert fit.report.jit.kept is True  # what is true of the model now


def test_a_failing_check_is_an_output_finding_and_the_others_run():
    class Broken(StubAdapter):
        def epoch_checks(self, interrupted):
            def label_cache(stats, records):
                raise OSError("disk full")

            return [label_cache, *super().epoch_checks(interrupted)]

    fit = FitOwner(settings(), StubModel(), {"steps": 1}, adapter=Broken)
    fit.begin()
    fit.epoch_begin(0)
    fit.epoch_end(0)
    found = {f.code: f for f in fit.report.findings}
    assert "label_cache failed: OSError: disk full" in (
        found[codes.OUTPUT_FAILED].message
    )
    assert fit.report.verdict is not None  # judged after it anyway


def test_per_shape_falls_back_whole_where_the_backend_cannot_switch():
    from keras_xla.core.report import GuardSection

    fit = owner(
        StubModel(steps_per_execution=4), on_recompile_storm="per_shape"
    )
    fit.adapter.switch_shapes = lambda bucket=None: None  # 4 per call
    storm = GuardSection(
        action="", budget=8, epoch=0, step=9, recompilations=9,
        compile_seconds=4.5, saved_seconds=0.0, window=10, compiled=9,
        input="x", dim=1, cause="dynamic_dim",
    )  # fmt: skip
    fit.storms.guard.storm = storm
    fit._watch_storm(10)  # the owner acts before step 10
    assert storm.action == "fallback" and storm.off_from == [0, 10]
    assert fit.model.jit_compile is False
    assert ("put", False, False) in fit.adapter.asked
    (found,) = [f for f in fit.book.findings if f.code == "recompile-storm"]
    assert (
        "on_recompile_storm='per_shape' needs one batch per train call on "
        "one replica; this fit runs 4 batches per call, so XLA is off for "
        "every shape instead." in found.message
    )


def test_bucket_refuses_a_model_that_does_not_mask_its_padding():
    import keras

    from keras_xla.core.report import GuardSection

    model = keras.Sequential(
        [
            keras.Input((None,), dtype="int32"),
            keras.layers.Embedding(50, 4, name="tokens"),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    )
    model.compile("sgd", "mse")
    fit = owner(on_recompile_storm="bucket")
    fit.model = fit.adapter.model = model
    asked = []
    fit.adapter.switch_shapes = lambda bucket=None: asked.append(bucket)
    storm = GuardSection(
        action="", budget=8, epoch=0, step=9, recompilations=9,
        compile_seconds=4.5, saved_seconds=0.0, window=10, compiled=9,
        input="x", dim=1, cause="dynamic_dim",
    )  # fmt: skip
    sig = Signature(
        0,
        (
            TensorSignature("x", (4, 9), "int32"),
            TensorSignature("y", (4, 1), "float32"),
        ),
    )
    records = [StepRecord("train", 9, 0.5, signatures=[(sig,)])]
    fit.storms.guard.storm = storm
    assert fit.storms.act(0, 10, records, None, 1) is None
    # Not padded: per shape was asked for instead (the stub could not).
    assert asked == [None]
    (found,) = [f for f in fit.book.findings if f.code == "bucket-refused"]
    assert (
        "did not pad input `x`, dimension 1: layer `tokens` (Embedding) "
        "has mask_zero=False: the padding would be read as tokens"
        in found.message
    )
    assert storm.edges == []


def test_after_a_storm_the_hlo_analysis_reads_only_what_ran_xla():
    from keras_xla.core.guard import signature_key
    from keras_xla.core.shape_switch import ShapeSwitch

    fit = owner(analyze_hlo=True)
    known, new = record(0), record(1)
    new.signatures = [
        (Signature(0, (TensorSignature("x", (8, 9), "float32"),)),)
    ]
    # Per shape: XLA compiled the first call's shapes, not the second's
    # (analyzing those would compile a program training never ran).
    compiled = {signature_key(known.signatures[0][0])}
    fit.adapter.switch = ShapeSwitch({"train": compiled})
    fit._analyze_hlo(None, [known, new, new])
    assert fit.adapter.analyzed == [known]
    fit.adapter.switch = None
    fit._analyze_hlo(None, [known, new])
    assert fit.adapter.analyzed == [known, new]
