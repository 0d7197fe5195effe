"""Is the verdict's speedup true? Against separate fits, side by side.

For each model, in one process: a fit with the default `XLATuner` (XLA on,
its no-XLA baseline window early in the first epoch) gives
`report.verdict.speedup`; then fresh copies of the model, one without and
one with XLA and neither with the tuner, are warmed up and then fit in
alternating blocks (so drift of the shared machine hits both alike), timed
by an independent clock (the median interval between train batch begins,
pooled over the blocks; the speedup's spread over the blocks says how
noisy that truth is). Printed: both speedups and their ratio (goal
within 10%), and the baseline's steps without XLA, their cost beyond
training them with XLA (the no-XLA step function's first call included,
shown apart) and that cost as a share of the tuner fit's first epoch.

Models: a residual MLP with LayerNorm and GELU (XLA fuses the elementwise
work), a wide Dense network whose matmuls dominate (oneDNN's kernels
against XLA's), a Conv1D classifier (keras-io's time-series shape) and a
small transformer on padded text (token ids padded to one length, as
`padded_batch(padded_shapes=...)` makes them). Printed too: the
verdict's range from its windows' spread, and whether the separate-fit
speedup falls in it. With `--warmups 0 20` each round fits the tuner once
per baseline warm-up (`Tunables.baseline_warmup_steps`: XLA steps before
the first window), each against the same separate fits; `--settling 0 1`
does the same for `Tunables.settling_windows` (each side's first windows
left out as settling); `--windows` prints each tuner fit's baseline
windows in order, each as its timed steps' median, and the range the
earlier rule (each round's pair of windows, not each window against
each) gives on the same windows; `--bracket` runs the tuner fits between
the separate fits' first and last two blocks (the truth measured before
and after the verdict, so a shift of the machine shows as a change
between them) and prints each block's speedup.

Run: python benchmarks/verdict_truth.py [--steps 300] [--rounds 3]
     [--warmups 20] [--settling 1] [--windows] [--bracket]
"""

import argparse
import dataclasses
import functools
import itertools
import os
import platform
import statistics
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras_xla  # noqa: E402, I001  (first: before TensorFlow starts)
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_xla.auto import policy  # noqa: E402
from keras_xla.auto import runner as auto_runner  # noqa: E402
from keras_xla.auto import trial as trial_lib  # noqa: E402
from keras_xla.auto.policy import TUNABLES  # noqa: E402
from keras_xla.core.render import format_table  # noqa: E402

BATCH = 16
BLOCKS = 4


def residual_mlp():
    inputs = keras.Input((64,))
    x = keras.layers.Dense(256)(inputs)
    for _ in range(4):
        h = keras.layers.LayerNormalization()(x)
        h = keras.layers.Dense(512, activation="gelu")(h)
        x = x + keras.layers.Dense(256)(h)
    return keras.Model(inputs, keras.layers.Dense(1)(x))


def wide_dense():
    inputs = keras.Input((64,))
    x = inputs
    for _ in range(3):
        x = keras.layers.Dense(2048, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(1)(x))


def conv1d_classifier():
    inputs = keras.Input((128, 8))
    x = keras.layers.Conv1D(32, 5, activation="relu")(inputs)
    x = keras.layers.MaxPooling1D(2)(x)
    x = keras.layers.Conv1D(64, 5, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(inputs, keras.layers.Dense(3)(x))


TEXT_LENGTH, VOCAB = 64, 1000


def padded_text_transformer():
    tokens = keras.Input((TEXT_LENGTH,), dtype="int32")
    x = keras.layers.Embedding(VOCAB, 32, mask_zero=False)(tokens)
    attended = keras.layers.MultiHeadAttention(4, 8)(x, x)
    x = keras.layers.LayerNormalization()(x + attended)
    hidden = keras.layers.Dense(64, activation="relu")(x)
    x = keras.layers.LayerNormalization()(x + keras.layers.Dense(32)(hidden))
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(tokens, keras.layers.Dense(3)(x))


class StepClock(keras.callbacks.Callback):
    """Intervals between train batch begins (one clock read each), per
    fit; a fit's first interval is left out. Also each batch's begin to
    its end (the train function's call, as the tuner times it, with
    Keras's batch-end work): `held_ms`, per block."""

    def __init__(self):
        super().__init__()
        self.stamps, self.gaps, self.block_ms = [], [], []
        self.held, self.block_held_ms = [], []

    def on_train_begin(self, logs=None):
        self.stamps, self.held = [], []

    def on_train_batch_begin(self, batch, logs=None):
        self.stamps.append(time.perf_counter())

    def on_train_batch_end(self, batch, logs=None):
        self.held.append(time.perf_counter() - self.stamps[-1])

    def on_train_end(self, logs=None):
        gaps = np.diff(self.stamps[1:])
        self.gaps.extend(gaps)
        self.block_ms.append(1000.0 * float(np.median(gaps)))
        self.block_held_ms.append(1000.0 * float(np.median(self.held[2:])))

    def median_ms(self):
        return 1000.0 * float(np.median(self.gaps))


LOSSES = {
    conv1d_classifier: "sparse_categorical_crossentropy",
    padded_text_transformer: "sparse_categorical_crossentropy",
}


def compiled(build, jit):
    keras.utils.set_random_seed(0)
    model = build()
    loss = LOSSES.get(build, "mse")
    if loss != "mse":
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile("adam", loss, jit_compile=jit)
    return model


def data(steps, build=None):
    rng = np.random.default_rng(0)
    n = steps * BATCH
    if build is conv1d_classifier:
        x = rng.random((n, 128, 8), dtype=np.float32)
        return x, rng.integers(0, 3, (n, 1))
    if build is padded_text_transformer:
        # Sentences of 8-64 tokens, zero-padded to 64.
        lengths = rng.integers(8, TEXT_LENGTH + 1, n)
        x = rng.integers(1, VOCAB, (n, TEXT_LENGTH)).astype("int32")
        x[np.arange(TEXT_LENGTH)[None, :] >= lengths[:, None]] = 0
        return x, rng.integers(0, 3, (n, 1))
    return rng.random((n, 64), dtype=np.float32), rng.random(
        (n, 1), dtype=np.float32
    )


def quiet_fit(model, x, y, callbacks, epochs=1):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(
            x,
            y,
            batch_size=BATCH,
            epochs=epochs,
            verbose=0,
            callbacks=callbacks,
        )


# Each tuner fit's baseline windows: (side, median ms of its timed steps),
# and the range the earlier rule gave on its steady windows.
WINDOWS: list[list[tuple[str, float]]] = []
ROUND_PAIR_RANGES: list[tuple[float, float] | None] = []
_finish_baseline = auto_runner.TrialRunner._finish_baseline


def _recording_finish(self, model):
    WINDOWS.append(
        [
            (c.name, 1000.0 * statistics.median(t))
            for c, t in self.trial.windows
            if t
        ]
    )
    keep = self.keep
    off = dataclasses.replace(keep, jit=False)
    ROUND_PAIR_RANGES.append(
        trial_lib.speedup_range(
            self.trial.steady_windows(off),
            self.trial.steady_windows(keep),
            cross=False,
        )
    )
    return _finish_baseline(self, model)


def tuner_fit(build, x, y):
    model = compiled(build, True)
    tuner = keras_xla.XLATuner(verbose=0, analyze_hlo=False)
    start = time.perf_counter()
    quiet_fit(model, x, y, [tuner])
    epoch_s = time.perf_counter() - start
    return tuner.report, epoch_s


def separate_fits(build, x, y, blocks=BLOCKS, between=None):
    """Median step ms without and with XLA (fresh models, warmed up, then
    fit in alternating blocks of the data), and the speedup's spread over
    the blocks: `(no_xla_ms, xla_ms, (lowest, highest block ratio),
    block ratios, block ratios by batch begin-to-end)`. `between`, when
    given, runs after the first half of the blocks (the tuner fits,
    bracketed by the truth in time)."""
    models = [compiled(build, False), compiled(build, True)]
    clocks = [StepClock(), StepClock()]
    for model in models:
        quiet_fit(model, x[: 20 * BATCH], y[: 20 * BATCH], [])  # warm-up
    size = len(x) // blocks
    for b in range(blocks):
        if between is not None and b == blocks // 2:
            between()
        part = slice(b * size, (b + 1) * size)
        for model, clock in zip(models, clocks):
            quiet_fit(model, x[part], y[part], [clock])
    ratios = [a / b for a, b in zip(clocks[0].block_ms, clocks[1].block_ms)]
    held = [
        a / b for a, b in zip(clocks[0].block_held_ms, clocks[1].block_held_ms)
    ]
    spread = (min(ratios), max(ratios))
    return clocks[0].median_ms(), clocks[1].median_ms(), spread, ratios, held


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default="residual,wide,conv1d,transformer")
    parser.add_argument(
        "--warmups",
        type=int,
        nargs="+",
        default=[TUNABLES.baseline_warmup_steps],
    )
    parser.add_argument(
        "--windows",
        action="store_true",
        help="print each tuner fit's baseline windows' median step ms",
    )
    parser.add_argument(
        "--settling",
        type=int,
        nargs="+",
        default=[TUNABLES.settling_windows],
    )
    parser.add_argument(
        "--bracket",
        action="store_true",
        help="run the tuner fits between the separate fits' first and "
        "last blocks, and print each block's speedup",
    )
    args = parser.parse_args()
    if args.windows:
        auto_runner.TrialRunner._finish_baseline = _recording_finish
    rows = [
        (
            "model",
            "round",
            "warm-up",
            "settling",
            "verdict speedup",
            "range",
            "separate fits",
            "blocks",
            "in range",
            "overlap",
            "ratio",
            "no-XLA steps",
            "cost s",
            "first call s",
            "share of epoch",
        )
    ]
    ratios, inside, overlaps = {}, {}, {}
    pair_ranges, in_pairs = {}, {}
    models = {
        "residual": ("residual MLP", residual_mlp),
        "wide": ("wide Dense", wide_dense),
        "conv1d": ("Conv1D classifier", conv1d_classifier),
        "transformer": ("padded-text transformer", padded_text_transformer),
    }
    for key in args.models.split(","):
        name, build = models[key]
        x, y = data(args.steps, build)
        for r in range(args.rounds):
            fits = []
            tuner_fits = functools.partial(
                fit_each_setting,
                args,
                (name, r),
                build,
                x,
                y,
                fits,
                pair_ranges,
            )
            if args.bracket:
                separate = separate_fits(build, x, y, between=tuner_fits)
                half = BLOCKS // 2
                for label, by_block in zip(
                    ("begin-to-begin", "begin-to-end"), separate[3:]
                ):
                    before, after = by_block[:half], by_block[half:]
                    print(
                        f"{name} round {r}: separate-fit speedup by block "
                        f"({label}), before the tuner fit "
                        f"{', '.join(f'{v:.3f}' for v in before)}; after it "
                        f"{', '.join(f'{v:.3f}' for v in after)}"
                    )
            else:
                tuner_fits()
                separate = separate_fits(build, x, y)
            for setting, report, epoch_s in fits:
                cells, ratio, held, overlap = row(
                    (name, r, *setting), report, epoch_s, separate
                )
                rows.append(cells)
                found = pair_ranges.get((name, setting, r))
                if found is not None:
                    truth = separate[0] / separate[1]
                    held_before = found[0] <= truth <= found[1]
                    in_pairs.setdefault((name, setting), []).append(held_before)
                    print(
                        f"{name} round {r}: the earlier rule's range "
                        f"(round pairs) {found[0]:.2f}-{found[1]:.2f}, "
                        f"separate fits {truth:.3f}: "
                        f"{'in' if held_before else 'out'}"
                    )
                ratios.setdefault((name, setting), []).append(ratio)
                inside.setdefault((name, setting), []).append(held)
                overlaps.setdefault((name, setting), []).append(overlap)
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} "
        f"cores, TensorFlow {tf.__version__}; {args.steps} steps of batch "
        f"{BATCH} per fit"
    )
    print("\n".join(format_table(rows)))
    for (name, setting), values in ratios.items():
        key = (name, setting)
        print(
            f"{name}, warm-up {setting[0]}, settling {setting[1]}: median "
            f"ratio {statistics.median(values):.3f} (goal 0.90-1.10); "
            f"separate-fit speedup in the verdict's range in "
            f"{sum(inside[key])} of {len(inside[key])} rounds; the range "
            f"meets the separate fits' block spread in {sum(overlaps[key])}"
        )
        if key in in_pairs:
            print(
                f"  the earlier rule's range (round pairs) held it in "
                f"{sum(in_pairs[key])} of {len(in_pairs[key])}"
            )


def fit_each_setting(args, where, build, x, y, fits, pair_ranges):
    """One tuner fit per setting (`--warmups` x `--settling`), appended to
    `fits` as `(setting, report, epoch seconds)`; with `--windows`, each
    fit's windows printed and the earlier rule's range kept in
    `pair_ranges` by `(name, setting, round)` (`where`: name, round)."""
    name, r = where
    for setting in itertools.product(args.warmups, args.settling):
        policy.TUNABLES = dataclasses.replace(
            TUNABLES,
            baseline_warmup_steps=setting[0],
            settling_windows=setting[1],
        )
        fits.append((setting, *tuner_fit(build, x, y)))
        if args.windows and WINDOWS:
            shown = ", ".join(f"{side} {ms:.2f}" for side, ms in WINDOWS[-1])
            print(f"{name} round {r} windows (ms): {shown}")
            pair_ranges[name, setting, r] = ROUND_PAIR_RANGES[-1]
    policy.TUNABLES = TUNABLES


def row(label, report, epoch_s, separate):
    """`(cells, ratio, in range, overlap)`: a tuner fit's verdict against
    the separate fits' speedup (`separate`: their no-XLA and XLA ms, and
    the speedup's spread over their blocks); `overlap`: whether the
    verdict's range meets that spread (the truth is measured too)."""
    no_xla, xla, (block_low, block_high) = separate[:3]
    truth = no_xla / xla
    v = report.verdict
    said = v.speedup
    ratio = said / truth if said else float("nan")
    low, high = v.speedup_low, v.speedup_high
    held = low is not None and low <= truth <= high
    overlap = low is not None and low <= block_high and block_low <= high
    base = report.baseline
    cost = base.cost_seconds
    cells = (
        *map(str, label),
        f"{said:.3f}" if said else "-",
        f"{low:.2f}-{high:.2f}" if low is not None else "-",
        f"{truth:.3f} ({no_xla:.2f}/{xla:.2f} ms)",
        f"{block_low:.2f}-{block_high:.2f}",
        "yes" if held else "no",
        "yes" if overlap else "no",
        f"{ratio:.3f}",
        str(base.run_steps),
        f"{cost:.3f}",
        f"{base.trace_seconds or 0:.3f}",
        f"{100 * cost / epoch_s:.1f}%",
    )
    return cells, ratio, held, overlap


if __name__ == "__main__":
    main()
