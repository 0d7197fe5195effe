"""ResNet-50 with XLA: the shape-drift problem and its fix, side by side.

The classic reason XLA does not pay off in image training is an input
pipeline whose shapes drift, so XLA compiles again and again. Here the
drifting pipeline crops each batch at a random *size* without resizing
(scale augmentation as it is often written), so every new crop size is a new
XLA compilation. The recipe cuts a fixed-size window with
`keras_xla.data.fixed_slice`, so the train step compiles once.
(`tf.image.random_crop` with a constant size would be static too; the drift
comes from the varying size.)

By default it trains three ways, one after the other, on built-in
synthetic images of variable decoded sizes (no download): random crops
without XLA, random crops with XLA, and the fixed slice with XLA. It
prints a line per step while it trains (a step that compiles shows as a
long one; the random crops with XLA meet the tuner's recompilation guard,
which, once they keep compiling (`--max-recompilations`), keeps XLA for
the crop sizes it compiled and runs new ones without XLA,
`--on-recompile-storm`) and
ends with a table (images per second steady and with
compiling included, compile seconds, recompilations, the step's fusion
ratio, the tuner's verdict for each run), each XLA run's verdict
against the script's own no-XLA run, a one-line conclusion, the answer
on this machine and where to look in TensorBoard's XLA tab.

Run: python examples/resnet50/train.py [--crop random|fixed] [--jit on|off]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_xla  # noqa: E402
from keras_xla.core import verdict as verdicts  # noqa: E402
from keras_xla.core.guard import ACTIONS as STORM_ACTIONS  # noqa: E402
from keras_xla.core.render import format_table, guard_line  # noqa: E402
from keras_xla.core.summaries import EventWriter  # noqa: E402
from keras_xla.data import fixed_slice  # noqa: E402

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")


def synthetic_images(
    image_size: int, classes: int = 10, count: int = 256, seed: int = 0
) -> tf.data.Dataset:
    """Random images whose decoded sizes vary, as a real JPEG folder's do.

    Heights and widths are drawn from `[image_size, 1.5 * image_size]`;
    labels cycle through `classes`. Values are floats in [0, 255].
    """
    low, high = image_size, image_size + image_size // 2 + 1

    def make(i):
        s = tf.stack([tf.cast(i, tf.int32), seed])
        hw = tf.random.stateless_uniform([2], s, low, high, tf.int32)
        image = tf.random.stateless_uniform(
            tf.concat([hw, [3]], 0), s + 1, 0.0, 255.0
        )
        return image, tf.cast(i % classes, tf.int32)

    return tf.data.Dataset.range(count).map(make)


def folder_images(path: str) -> tuple[tf.data.Dataset, int]:
    """Images from `path/<class>/<file>`, decoded at their own size."""
    classes = sorted(
        d for d in os.listdir(path) if os.path.isdir(os.path.join(path, d))
    )
    files, labels = [], []
    for label, name in enumerate(classes):
        folder = os.path.join(path, name)
        for f in sorted(os.listdir(folder)):
            if f.lower().endswith(IMAGE_EXTENSIONS):
                files.append(os.path.join(folder, f))
                labels.append(label)
    if not files:
        raise ValueError(
            f"No images found under `--data {path}`: expected one folder per "
            f"class holding {', '.join(IMAGE_EXTENSIONS)} files."
        )

    def load(file, label):
        raw = tf.io.read_file(file)
        image = tf.io.decode_image(raw, channels=3, expand_animations=False)
        return tf.cast(image, tf.float32), label

    ds = tf.data.Dataset.from_tensor_slices((files, labels)).shuffle(
        len(files), seed=0
    )
    return ds.map(load, num_parallel_calls=tf.data.AUTOTUNE), len(classes)


def drifting_pipeline(ds, image_size, batch_size, seed=0):
    """Random-size square crops, no resize: one crop size per batch.

    Each batch's crop side is drawn from `[3/4 * image_size, image_size]`,
    so the batch shape changes from batch to batch.
    """
    low = (3 * image_size) // 4

    def crop(i, element):
        image, label = element
        s = tf.stack([tf.cast(i // batch_size, tf.int32), seed])
        side = tf.random.stateless_uniform([], s, low, image_size + 1, tf.int32)
        image = tf.image.random_crop(image, tf.stack([side, side, 3]))
        return image / 255.0, label

    return ds.enumerate().map(crop).batch(batch_size, drop_remainder=True)


def fixed_pipeline(ds, image_size, batch_size):
    """The recipe: a fixed-size window at a random offset; static shape."""
    return ds.map(
        lambda image, label: (fixed_slice(image, image_size) / 255.0, label)
    ).batch(batch_size, drop_remainder=True)


def build_model(classes: int) -> keras.Model:
    backbone = keras.applications.ResNet50(
        weights=None,
        include_top=False,
        input_shape=(None, None, 3),
        pooling="avg",
    )
    outputs = keras.layers.Dense(
        classes, activation="softmax", dtype="float32", name="predictions"
    )(backbone.output)
    return keras.Model(backbone.input, outputs, name="resnet50")


# The three ways, in the order they run: (crop, XLA).
RUNS = (("random", False), ("random", True), ("fixed", True))


class Progress(keras.callbacks.Callback):
    """A line per train step with its seconds, so a compiling step shows."""

    def __init__(self, label: str, steps: int):
        super().__init__()
        self.label, self.steps = label, steps
        self.start = self.last = 0.0

    def on_train_begin(self, logs=None):
        self.start = self.last = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        print(
            f"  {self.label} step {batch + 1}/{self.steps}: "
            f"{now - self.last:.2f} s (total {now - self.start:.1f} s)",
            flush=True,
        )
        self.last = now


def run_config(crop: str, jit: bool, args, source=None) -> dict:
    """Trains one fresh ResNet-50 on one pipeline; returns the table row."""
    keras.utils.set_random_seed(args.seed)
    keras.mixed_precision.set_global_policy(args.precision)
    if source is None:
        if args.data:
            source, classes = folder_images(args.data)
        else:
            source, classes = synthetic_images(args.image_size), 10
    else:
        source, classes = source
    make = drifting_pipeline if crop == "random" else fixed_pipeline
    ds = make(source.repeat(), args.image_size, args.batch_size)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    model = build_model(classes)
    model.compile(
        keras.optimizers.SGD(0.01, momentum=0.9),
        "sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    label = f"{crop}-{'xla' if jit else 'no-xla'}"
    log_dir = os.path.join(args.log_dir, label)
    # No baseline window: the no-XLA run is this script's baseline, and a
    # window would move some of a short run's steps off XLA.
    tuner = keras_xla.XLATuner(
        log_dir=log_dir,
        jit_compile=jit,
        verbose=0,
        baseline=False,
        max_recompilations=args.max_recompilations,
        on_recompile_storm=args.on_recompile_storm,
    )
    callbacks = [keras.callbacks.TensorBoard(log_dir=log_dir), tuner]
    if args.verbose == 0:
        callbacks.append(Progress(label, args.steps * args.epochs))
    start = time.perf_counter()
    with warnings.catch_warnings():
        # The tuner's findings are in the table; keep the output readable.
        warnings.simplefilter("ignore")
        model.fit(
            ds,
            epochs=args.epochs,
            steps_per_epoch=args.steps,
            callbacks=callbacks,
            verbose=args.verbose,
        )
    wall = time.perf_counter() - start
    report = tuner.report
    steps = sum(e.steps for e in report.epochs)
    medians = [
        e.step_time_ms["median"]
        for e in report.epochs
        if e.step_time_ms["median"] is not None
    ]
    median_ms = sorted(medians)[len(medians) // 2] if medians else None
    rates = [e.examples_per_second for e in report.epochs]
    return {
        "label": label,
        "crop": crop,
        "jit": jit,  # as the run asked (the guard may turn XLA off)
        "guard": report.guard,
        "compilations": report.total_compilations,
        "recompilations": len(report.recompilations),
        "compile_seconds": report.total_compile_seconds,
        "median_step_ms": median_ms,
        "images_per_second": rates[-1] if rates else None,
        "images_per_second_overall": steps * args.batch_size / wall
        if wall
        else None,
        "wall_seconds": wall,
        "fusion_ratio": report.hlo["fusion_ratio"] if report.hlo else None,
        "verdict": report.verdict,
        "findings": [f.code for f in report.findings],
        "report": report,
        "log_dir": log_dir,
    }


def render(rows: list[dict]) -> str:
    header = (
        "run",
        "compiles",
        "recompiles",
        "compile s",
        "median ms",
        "img/s",
        "img/s incl. compile",
        "fusion",
        "steady vs no XLA",
        "verdict",
    )
    table = [header]
    base = next((r for r in rows if not r["jit"]), None)
    for r in rows:
        table.append(
            (
                r["label"],
                str(r["compilations"]),
                str(r["recompilations"]),
                f"{r['compile_seconds']:.1f}",
                _fmt(r["median_step_ms"], 1),
                _fmt(r["images_per_second"], 1),
                f"{r['images_per_second_overall']:.1f}",
                _fmt(r["fusion_ratio"], 2),
                ratio(r, base, "images_per_second")
                if base and r is not base
                else "-",
                short_verdict(r["verdict"], r["guard"]),
            )
        )
    return "\n".join(format_table(table))


# What the guard did from its step on, in the table's few words.
STORM_WORDS = {"per_shape": "new shapes without XLA", "bucket": "padded"}


def short_verdict(verdict, guard=None) -> str:
    """The tuner's verdict in a few words: XLA off (or turned off by the
    recompilation guard), or its cost."""
    if guard is not None and guard.off_from:
        epoch, step = guard.off_from
        did = STORM_WORDS.get(guard.action, "no XLA")
        return f"storm: {did} from epoch {epoch}, step {step}"
    if verdict is None or not verdict.xla_enabled:
        return "XLA off"
    text = f"compiled {verdict.compile_seconds:.1f} s"
    if verdict.next_steps:
        step = verdict.next_steps[0]
        seconds = step.get("seconds")
        cost = f" ({seconds:.1f} s)" if seconds else ""
        text += f"; next: {step['code']}{cost}"
    return text


def conclusion(rows: list[dict]) -> str:
    """One line from the measured rows: what the fixed slice bought."""
    by = {(r["crop"], bool(r["jit"])): r for r in rows}
    base, drift, fixed = (by.get(k) for k in RUNS)
    if not (drift and fixed):
        best = max(rows, key=lambda r: r["images_per_second_overall"])
        return f"Fastest overall: {best['label']}."
    text = (
        f"With XLA, random crops compiled {drift['compilations']} times "
        f"({drift['compile_seconds']:.1f} s) and the fixed slice "
        f"{fixed['compilations']} ({fixed['compile_seconds']:.1f} s); "
        f"including compile the fixed slice ran "
        f"{ratio(fixed, drift)} the random crops' images per second"
    )
    if base:
        text += (
            f" and {ratio(fixed, base)} the no-XLA run's, steady "
            f"{ratio(fixed, base, 'images_per_second')}"
        )
    return text + "."


def measured_verdict(row: dict, base: dict | None):
    """The tuner's verdict of an XLA run (`row`), with the speedup this
    script measured: its own no-XLA run (`base`) as the baseline, steady
    median step against steady median step. The tuner's verdict when
    there is no such run, or XLA is off."""
    measured = measured_report(row, base)
    return row["verdict"] if measured is None else measured.verdict


def measured_report(row: dict, base: dict | None):
    """The XLA run's report with this script's no-XLA run as its baseline
    and the verdict built on it, or None (no such run, or XLA off)."""
    verdict = row["verdict"]
    if verdict is None or not verdict.xla_enabled or base is None:
        return None
    if not base["median_step_ms"]:
        return None
    return verdicts.against_run(
        row["report"],
        base["median_step_ms"],
        sum(e.steps for e in base["report"].epochs),
        row["median_step_ms"],
    )


def publish_measured(rows: list[dict]) -> None:
    """Writes each XLA run's measured report where its reader looks: its
    `xla_report.json` and, as a newer `xla/report` summary, the XLA tab."""
    base = next((r for r in rows if not r["jit"]), None)
    for r in rows:
        measured = measured_report(r, base)
        if measured is None:
            continue
        measured.write(r["log_dir"])
        writer = EventWriter(r["log_dir"])
        writer.write_report(
            max(len(measured.epochs) - 1, 0), measured.to_json()
        )
        writer.close()


def verdict_lines(rows: list[dict]) -> list[str]:
    """A verdict line per run: the XLA runs' against this script's
    no-XLA run (`measured_verdict`), where it ran."""
    base = next((r for r in rows if not r["jit"]), None)
    lines = []
    for r in rows:
        verdict = measured_verdict(r, base)
        if verdict is None:
            continue
        line = f"  {r['label']}: {verdict.headline}"
        if verdict is not r["verdict"]:
            line += f" (baseline: this script's {base['label']} run)"
        lines.append(line)
    return lines


def answer(rows: list[dict]) -> str:
    """The measured answer in one sentence: what the fixed slice removed,
    how XLA's step compares with the no-XLA step here, and so how to
    train this model on this machine."""
    by = {(r["crop"], bool(r["jit"])): r for r in rows}
    base, drift, fixed = (by.get(k) for k in RUNS)
    parts = []
    if drift and fixed:
        removed = drift["compilations"] - fixed["compilations"]
        saved = drift["compile_seconds"] - fixed["compile_seconds"]
        parts.append(
            f"the fixed slice removed {removed} of "
            f"{drift['compilations']} compilations ({saved:.0f} s)"
        )
    xla = fixed or drift
    verdict = measured_verdict(xla, base) if xla else None
    if verdict is not None and verdict.speedup is not None:
        how = "the fixed slice" if xla is fixed else "these crops"
        step = f"XLA's step is {verdict.speedup:.2f}x the no-XLA step here"
        if verdict.speedup <= 1:
            parts.append(f"{step}, so train this model without XLA")
        elif verdict.paid_back:
            parts.append(f"{step}, so train this model with XLA and {how}")
        else:
            parts.append(
                f"{step}, but compiling pays back only after "
                f"{verdict.break_even_steps:,} steps: train with XLA and "
                f"{how} for runs longer than that, without it for shorter"
            )
    if not parts:
        return "On this machine: " + conclusion(rows)
    devices = xla["report"].environment.get("devices") or [] if xla else []
    gpu = any("GPU" in str(d) for d in devices)
    where = "on another GPU" if gpu else "on a GPU"
    return (
        f"On this machine: {'; '.join(parts)}; {where} run the same comparison."
    )


def tensorboard_lines(rows: list[dict], log_dir: str) -> list[str]:
    """Where to look in TensorBoard: the XLA tab, and its run names."""
    runs = [f"{r['label']}/train" for r in rows]
    drift = next((r for r in rows if r["crop"] == "random" and r["jit"]), None)
    lines = [
        f"TensorBoard: tensorboard --logdir {log_dir}, then the XLA tab:",
        f"  each run's verdict ({', '.join(runs)});",
    ]
    if drift is not None:
        lines.append(
            f"  run {drift['label']}/train: its {drift['compilations']} "
            "compilations marked on the step times, each with its cause;"
        )
    if len(rows) > 1:
        lines.append("  'Compare with': two runs side by side.")
    return lines


def ratio(a: dict, b: dict, key: str = "images_per_second_overall") -> str:
    """`a`'s `key` over `b`'s, as "1.23x"; "-" where either is unknown
    (a run whose every step compiled has no steady images per second)."""
    if not a[key] or not b[key]:
        return "-"
    return f"{a[key] / b[key]:.2f}x"


def _fmt(value, digits):
    return "-" if value is None else f"{value:.{digits}f}"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="ResNet-50 with XLA: drifting crops vs a fixed slice."
    )
    parser.add_argument(
        "--crop",
        choices=("all", "random", "fixed"),
        default="all",
        help="only this pipeline's runs (default: the three ways)",
    )
    parser.add_argument(
        "--jit",
        choices=("all", "on", "off"),
        default="all",
        help="only the runs with XLA on or off (default: the three ways)",
    )
    parser.add_argument(
        "--data",
        default=None,
        help="folder of images, one subfolder per class "
        "(default: built-in synthetic images)",
    )
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=12, help="steps per epoch")
    parser.add_argument("--precision", choices=PRECISIONS, default="float32")
    parser.add_argument("--log-dir", default=os.path.join("runs", "resnet50"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--max-recompilations",
        type=budget,
        default=2,
        help="the tuner's recompilation guard: XLA off once a run keeps "
        "compiling beyond this many recompilations (default 2: this run "
        "is short; the tuner's own default is 8); 'none' turns it off",
    )
    parser.add_argument(
        "--on-recompile-storm",
        choices=STORM_ACTIONS,
        default="per_shape",
        help="what the guard does (the tuner's on_recompile_storm): "
        "'per_shape' (default) keeps XLA for the crops it compiled and "
        "runs new ones without XLA; 'fallback' turns XLA off; 'bucket' "
        "refuses here (images have no mask) and runs per shape",
    )
    parser.add_argument(
        "--verbose",
        type=int,
        choices=(0, 1, 2),
        default=0,
        help="Keras's progress output; 0 (default) prints a line per step",
    )
    args = parser.parse_args(argv)
    if args.image_size < 32:
        parser.error(f"--image-size {args.image_size}: ResNet-50 needs >= 32")
    for name in ("batch_size", "epochs", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def budget(text: str) -> int | None:
    """`--max-recompilations`: an integer >= 1, or "none"."""
    if text.lower() == "none":
        return None
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: pass >= 1 or 'none'")
    return value


def selected_runs(crop: str, jit: str) -> list[tuple[str, bool]]:
    """The three ways, narrowed by `--crop` and `--jit`; a pair outside
    them (`--crop fixed --jit off`) runs on its own."""
    runs = [
        (c, j)
        for c, j in RUNS
        if crop in ("all", c) and jit in ("all", "on" if j else "off")
    ]
    if not runs:
        runs = [(crop, jit == "on")]
    return runs


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    rows = []
    for crop, jit in selected_runs(args.crop, args.jit):
        xla = "on" if jit else "off"
        print(f"\n== {crop} crops, XLA {xla}, {args.precision} ==", flush=True)
        rows.append(run_config(crop, jit, args))
    print("\n" + render(rows))
    print("\n".join(verdict_lines(rows)))
    publish_measured(rows)
    print("\n" + conclusion(rows))
    for r in rows:
        for rec in r["report"].recompilations[:3]:
            print(f"  {r['label']}: {rec.message}")
        for line in guard_line(r["guard"]):
            print(f"  {r['label']}: {line}")
    print("\n" + answer(rows))
    print("\n" + "\n".join(tensorboard_lines(rows, args.log_dir)))
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
