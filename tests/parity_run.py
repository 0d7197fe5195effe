"""The same fits on either backend, printed as the parity test compares
them.

Run with `KERAS_BACKEND` set and a log dir. Each scenario is a small fit
with a default `XLATuner()` unless it says otherwise; for each, the
report's compilations per function, its recompilations (function, input,
dimension, before, after, cause) and its finding codes are printed, all
scenarios as one JSON object on the last line.

- `partial`: an MLP on 200 samples in batches of 32 (a short last batch
  of 8), three epochs, validation on 70 samples (a short last batch of
  6): the no-XLA baseline runs in the first epoch and sees the short
  batch first.
- `padded`: token batches padded to the longest in each batch (lengths
  8, 12, 8, 16, 12): each new length compiles.
- `spe`: `partial`'s fit with `steps_per_execution=2`.
- `second_fit`: two fits of one model with one tuner: the second
  compiles nothing.
- `unknown`: a generator of unknown length, two epochs.
- `auto`: `jit_compile="auto"` on `partial`'s data.
- `cache`: `compile_cache` in a new directory: every compilation a miss.
- `storm`: 30 batches padded to lengths that never repeat (8, 9, 10,
  ...): the recompilation guard falls back to no XLA after its budget
  (the baseline window ends there); every step trains, and the weights
  are those of a fit without XLA. `storm_raise` and `storm_warn` act as
  named; `buckets` cycles through 6 lengths (under the budget):
  untouched; `per_shape` keeps XLA for the lengths it compiled before
  its storm and runs new ones without XLA; `bucket` pads to buckets a
  pooled model and one with a label per token, both masked, and refuses
  an unmasked one; `bucket_memory` pads on a device whose memory holds
  the programs of lengths up to 30 only.
"""

import functools
import json
import os
import sys
import warnings

warnings.simplefilter("ignore")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_xla  # noqa: E402


def mlp():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    return model


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, 8), np.float32), rng.random((n, 1), np.float32)


def summary(report, **extra):
    per_function = {}
    for epoch in report.epochs:
        for function, figures in epoch.by_function.items():
            count = figures["compilations"]
            per_function[function] = per_function.get(function, 0) + count
    return {
        "compilations": per_function,
        "recompilations": sorted(
            [r.function, r.input, r.dim, r.before, r.after, r.cause]
            for r in report.recompilations
        ),
        "codes": sorted(set(report.finding_codes())),
        **extra,
    }


def partial(log_dir, **tuner_args):
    model = mlp()
    model.compile("adam", "mse", steps_per_execution=tuner_args.pop("spe", 1))
    tuner = keras_xla.XLATuner(log_dir=log_dir, verbose=0, **tuner_args)
    model.fit(
        *data(200),
        batch_size=32,
        epochs=3,
        validation_data=data(70, 1),
        verbose=0,
        callbacks=[tuner],
    )
    return tuner.report


class Lengths(keras.utils.PyDataset):
    """Token batches of the given lengths, in order."""

    def __init__(self, lengths):
        super().__init__()
        self.lengths = lengths

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        x = rng.integers(1, 50, (4, self.lengths[i])).astype("int32")
        return x, rng.random((4, 1)).astype("float32")


# Token batches padded to the longest sequence in each batch.
PADDED = (8, 12, 8, 16, 12)


def padded(log_dir):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((None,), dtype="int32"),
            keras.layers.Embedding(50, 8),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse")
    tuner = keras_xla.XLATuner(log_dir=log_dir, verbose=0, baseline=False)
    model.fit(
        Lengths(PADDED), epochs=1, shuffle=False, verbose=0, callbacks=[tuner]
    )
    return tuner.report


def second_fit(log_dir):
    model = mlp()
    model.compile("adam", "mse")
    tuner = keras_xla.XLATuner(log_dir=log_dir, verbose=0, baseline=False)
    x, y = data(128)
    fits = []
    for _ in range(2):
        model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[tuner])
        fits.append(summary(tuner.report))
    return fits


def unknown(log_dir):
    x, y = data(96)

    def batches():
        for i in range(0, 96, 32):
            yield x[i : i + 32], y[i : i + 32]

    model = mlp()
    model.compile("adam", "mse")
    tuner = keras_xla.XLATuner(log_dir=log_dir, verbose=0, baseline=False)
    model.fit(batches(), epochs=1, verbose=0, callbacks=[tuner])
    return tuner.report


def tokens(width, jit=True):
    """A token model whose program differs by `width` (JAX reuses a
    program compiled for another model of the same HLO in the process)."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((None,), dtype="int32"),
            keras.layers.Embedding(50, width),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    )
    model.compile("sgd", "mse", jit_compile=jit)
    return model


class PerToken(Lengths):
    """Token batches with a label per token."""

    def __getitem__(self, i):
        x, _ = super().__getitem__(i)
        return x, np.random.default_rng(i).integers(0, 3, x.shape)


def masked(width, jit=True, per_token=False):
    """A token model that masks its padding (`Embedding(mask_zero=True)`):
    pooled to one output, or (`per_token`) a label per token."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(50, width, mask_zero=True)(inputs)
    if per_token:
        outputs = keras.layers.Dense(3)(x)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    else:
        outputs = keras.layers.Dense(1)(
            keras.layers.GlobalAveragePooling1D()(x)
        )
        loss = "mse"
    model = keras.Model(inputs, outputs)
    model.compile("sgd", loss, jit_compile=jit)
    return model


def guarded(
    log_dir, width, lengths, against_plain=False, model=tokens, **tuner_args
):
    """A fit of `model(width)` on batches of `lengths` under the guard:
    its report's summary with the guard's section, the steps trained, an
    error raised, the steps that compiled, the losses, and
    (`against_plain`) how far the weights are from a fit without XLA (on
    JAX op by op, each new length slow)."""
    make, batches = model, Lengths
    if model == "per_token":
        make = functools.partial(masked, per_token=True)
        batches = PerToken
    elif model == "masked":
        make = masked
    model = make(width)
    tuner = keras_xla.XLATuner(log_dir=log_dir, verbose=0, **tuner_args)
    written = xla_written()
    raised = None
    losses = plain_losses = None
    try:
        history = model.fit(
            batches(lengths), shuffle=False, verbose=0, callbacks=[tuner]
        )
        losses = history.history["loss"]
    except keras_xla.XLARecompileStormError as error:
        raised = str(error)
    apart = None
    if against_plain:
        plain = make(width, jit=False)
        history = plain.fit(batches(lengths), shuffle=False, verbose=0)
        plain_losses = history.history["loss"]
        apart = max(
            float(np.max(np.abs(a - b)))
            for a, b in zip(model.get_weights(), plain.get_weights())
        )
    report = tuner.report
    guard = report.guard.to_dict() if report.guard else None
    if written is not None:
        written = xla_written() - written
    return summary(
        report,
        guard=guard,
        steps=int(model.optimizer.iterations.numpy()),
        raised=raised,
        compiled_at=[c.step for c in report.compile_log],
        compiled_shapes=[[c.step, c.shapes] for c in report.compile_log],
        program_bytes=[c.program_bytes for c in report.compile_log],
        outside=report.outside_compilations,
        weights_apart=apart,
        jit_enabled=report.jit.enabled,
        xla_written=written,
        lengths=list(lengths),
        losses=[losses, plain_losses],
    )


def memory_limited(log_dir, width, lengths, **tuner_args):
    """`guarded` on the masked model, on a device whose memory holds the
    program of length 30 and not of 31: the limit is made from the
    programs a probe fit of the same model compiled for lengths 8 and 30
    (their bytes, as XLA assigned them)."""
    from keras_xla import backends
    from keras_xla.core import buckets
    from keras_xla.core.hardware import DeviceInfo

    probe = masked(width)
    tuner = keras_xla.XLATuner(verbose=0, baseline=False, analyze_hlo=False)
    probe.fit(Lengths([8, 30]), shuffle=False, verbose=0, callbacks=[tuner])
    at = {c.shapes["x"][1]: c.program_bytes for c in tuner.report.compile_log}
    per_unit = (at[30] - at[8]) / 22
    limit = int((at[30] + per_unit / 2) / buckets.MEMORY_SHARE)
    listed = backends.device_infos
    backends.device_infos = lambda devices=None: [
        DeviceInfo("CPU", "limited", None, limit)
    ]
    try:
        out = guarded(log_dir, width, lengths, model="masked", **tuner_args)
    finally:
        backends.device_infos = listed
    return {**out, "probe_bytes": at, "limit": limit}


def xla_written():
    """On TensorFlow, XLA's compilations in this process so far, from
    its own record (the compile ledger); None on JAX, whose counts are
    JAX's own compile events."""
    if keras.backend.backend() != "tensorflow":
        return None
    from keras_xla.tf_backend import compile_ledger

    return compile_ledger.written()


NEVER_REPEAT = [8 + i for i in range(30)]
# Twelve new lengths (a storm at the tenth), then known lengths (odd
# steps) between new ones (even steps), and a known one seen again.
# Twelve new lengths (a storm at the tenth), then 24 lengths from 8 to 47.
BUCKETED = [8 + i for i in range(12)] + [8 + (7 * i) % 40 for i in range(24)]
BUCKET = {"against_plain": True, "on_recompile_storm": "bucket"}
PER_SHAPE = [8 + i for i in range(12)] + [
    8 + i % 12 if i % 2 else 40 + i for i in range(20)
]


def main(log_dir):
    out = {"backend": keras.backend.backend()}
    report = partial(os.path.join(log_dir, "partial"))
    out["partial"] = summary(report, baseline_steps=report.baseline.steps)
    report = partial(os.path.join(log_dir, "spe"), spe=2)
    out["spe"] = summary(report)
    out["padded"] = summary(padded(os.path.join(log_dir, "padded")))
    out["second_fit"] = second_fit(os.path.join(log_dir, "second"))
    out["unknown"] = summary(unknown(os.path.join(log_dir, "unknown")))
    report = partial(os.path.join(log_dir, "auto"), jit_compile="auto")
    out["auto"] = summary(
        report,
        candidates=sorted(c["name"] for c in report.decision.candidates),
    )
    cache = os.path.join(log_dir, "compile_cache")
    report = partial(
        os.path.join(log_dir, "cache"), compile_cache=cache, baseline=False
    )
    section = report.compile_cache
    out["cache"] = summary(report, hits=section.hits, misses=section.misses)
    for name, width, lengths, args in (
        (
            "storm",
            5,
            NEVER_REPEAT,
            {"against_plain": True, "on_recompile_storm": "fallback"},
        ),
        ("storm_raise", 6, NEVER_REPEAT, {"on_recompile_storm": "raise"}),
        # The storm's twin: the same lengths, the guard only warns, so XLA
        # stays on and compiles what the fallback avoided (no baseline
        # windows: in a fit this short they would take steps 4-9 without
        # XLA).
        (
            "storm_warn",
            7,
            NEVER_REPEAT,
            {"on_recompile_storm": "warn", "baseline": False},
        ),
        ("buckets", 9, [8, 12, 16, 20, 24, 28] * 5, {}),
        # The guard's default.
        ("per_shape", 10, PER_SHAPE, {"against_plain": True}),
        # Padded to buckets: a pooled model and a label per token, both
        # masking their padding; the unmasked model is refused.
        ("bucket", 11, BUCKETED, {**BUCKET, "model": "masked"}),
        ("bucket_tokens", 12, BUCKETED, {**BUCKET, "model": "per_token"}),
        ("bucket_refused", 13, BUCKETED, {"on_recompile_storm": "bucket"}),
    ):
        sub = os.path.join(log_dir, name)
        out[name] = guarded(sub, width, lengths, **args)
    from keras_xla import backends
    from keras_xla.core import hardware

    out["device_memory"] = hardware.memory_limit(backends.device_infos())
    sub = os.path.join(log_dir, "bucket_memory")
    out["bucket_memory"] = memory_limited(sub, 14, BUCKETED, **BUCKET)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
