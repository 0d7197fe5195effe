"""Time to first step with and without XLA's persistent compile cache.

Runs the same training script twice, each in a fresh process, with
`XLATuner(compile_cache=DIR)` on an empty directory: the first run compiles
and fills the cache (misses), the second is served from it (hits). Prints
the time from the start of `fit` to the end of the first step, the tuner's
compile seconds, hits and misses, and the ratio.

Run: python benchmarks/compile_cache.py [--model mobilenetv2|resnet50]
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, sys, time, warnings
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
warnings.simplefilter("ignore")
import keras_xla
tuner = keras_xla.XLATuner(compile_cache=sys.argv[1], verbose=0,
                           analyze_hlo=False)
import keras, numpy as np
name, size, batch = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
build = {"mobilenetv2": keras.applications.MobileNetV2,
         "resnet50": keras.applications.ResNet50}[name]
keras.utils.set_random_seed(0)
model = build(weights=None, input_shape=(size, size, 3), classes=10)
model.compile("sgd", "sparse_categorical_crossentropy")
x = np.random.default_rng(0).random((batch * 3, size, size, 3), "float32")
y = np.arange(batch * 3) % 10

class FirstStep(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.start = time.perf_counter()
    def on_train_batch_end(self, batch, logs=None):
        if batch == 0:
            self.seconds = time.perf_counter() - self.start

first = FirstStep()
model.fit(x, y, batch_size=batch, epochs=1, verbose=0,
          callbacks=[tuner, first])
r = tuner.report
print(json.dumps({"first_step_seconds": first.seconds,
                  "compile_seconds": r.total_compile_seconds,
                  "hits": r.compile_cache["hits"],
                  "misses": r.compile_cache["misses"]}))
"""


def run(cache_dir, args):
    cmd = [
        sys.executable,
        "-c",
        CHILD,
        cache_dir,
        args.model,
        str(args.image_size),
        str(args.batch_size),
    ]
    env = {k: v for k, v in os.environ.items() if k != "TF_XLA_FLAGS"}
    out = subprocess.run(
        cmd, capture_output=True, text=True, env=env, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--model", default="mobilenetv2", choices=("mobilenetv2", "resnet50")
    )
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="keras_xla_cache_") as cache:
        cold = run(cache, args)
        warm = run(cache, args)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores; "
        f"{args.model} {args.image_size}x{args.image_size}, batch "
        f"{args.batch_size}, XLA on CPU"
    )
    for name, r in (("first run (cold)", cold), ("restart (cached)", warm)):
        print(
            f"{name:17} first step {r['first_step_seconds']:6.2f} s, "
            f"compile {r['compile_seconds']:6.2f} s, hits {r['hits']}, "
            f"misses {r['misses']}"
        )
    ratio = cold["first_step_seconds"] / warm["first_step_seconds"]
    print(f"time-to-first-step ratio cold/cached: {ratio:.2f}x")


if __name__ == "__main__":
    main()
