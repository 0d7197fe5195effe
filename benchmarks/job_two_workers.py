"""A two-worker job under XLATuner: the job's table, and what gathering
the workers' reports costs the chief.

Two worker processes on 127.0.0.1 (free ports), each with
`XLATuner(log_dir=LOG_DIR)` on one shared log dir:

- TensorFlow: `MultiWorkerMirroredStrategy` (TF_CONFIG), a
  `keras_xla.XLAModel` (a Conv1D model, batches of 32 per worker);
- JAX: `jax.distributed.initialize` with gloo CPU collectives and
  `keras.distribution.DataParallel`, a `keras.Model` (the same layers,
  a global batch of 64).

Each worker times its epochs (a callback's begin to end). The chief
also times its job report, the one thing a job adds to a worker's
work: reading the workers' reports (`core.workers.read_workers`, once per
poll), the wait for the other worker's final report beyond that
reading, building the job's report and writing it. All of it happens
once, at the end of training (no hook of a step or an epoch gathers
anything); printed: each part, the whole, and the whole spread over the
run's epochs as a share of the median epoch (goal: under 1%), then the
job's table as `keras-xla report LOG_DIR` prints it.

With `--without-tuner`, each job runs again without the tuner, for its
epoch time.

Run: python benchmarks/job_two_workers.py [--engine tf|jax|both]
     [--epochs 5] [--steps 20] [--uneven] [--without-tuner]
(`--uneven`, TensorFlow's workers only: worker 1's shard is half a
batch short, so it compiles its short last batch alone and the job
names the others' wait; JAX's workers share one global batch.)
"""

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.abspath(__file__)
FEATURES, LENGTH, BATCH = 8, 64, 32


def free_ports(count):
    """`count` ports that 127.0.0.1 has free now."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def data(rows, seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.random((rows, LENGTH, FEATURES), dtype=np.float32)
    return x, rng.random((rows, 1), dtype=np.float32)


def build(cls):
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((LENGTH, FEATURES))
    h = keras.layers.Conv1D(64, 5, activation="relu")(inputs)
    h = keras.layers.Conv1D(64, 5, activation="relu")(h)
    h = keras.layers.GlobalAveragePooling1D()(h)
    model = cls(inputs, keras.layers.Dense(1)(h))
    model.compile(keras.optimizers.SGD(0.01), "mse", jit_compile=True)
    return model


def timed_job_report(spent):
    """Times the chief's job report by part, into `spent` (seconds)."""
    from keras_xla.core import job, workers

    def timing(name, function):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + (
                    time.perf_counter() - start
                )

        return wrapper

    workers.read_workers = timing("read", workers.read_workers)
    workers.gather = timing("gather", workers.gather)
    job.build = timing("build", job.build)
    job.JobReport.write = timing("write", job.JobReport.write)


def worker(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    warnings.simplefilter("ignore")
    if args.engine == "jax":
        os.environ["KERAS_BACKEND"] = "jax"
        os.environ["JAX_PLATFORMS"] = "cpu"
        import jax

        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=f"127.0.0.1:{args.port}",
            num_processes=2,
            process_id=args.index,
        )
    else:
        os.environ["KERAS_BACKEND"] = "tensorflow"
    import keras

    import keras_xla

    spent = {}
    timed_job_report(spent)
    epochs = []

    class EpochClock(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            epochs.append(time.perf_counter() - self.start)

    tuner = keras_xla.XLATuner(log_dir=args.log_dir, verbose=0)
    callbacks = [EpochClock()] + ([] if args.bare else [tuner])
    rows = args.steps * BATCH
    if args.engine == "jax":
        distribution = keras.distribution.DataParallel()
        distribution.auto_shard_dataset = False
        keras.distribution.set_distribution(distribution)
        model = build(keras.Model)
        x, y = data(2 * rows, 0)
        model.fit(
            x, y, batch_size=2 * BATCH, epochs=args.epochs, shuffle=False,
            verbose=0, callbacks=callbacks,
        )  # fmt: skip
    else:
        import tensorflow as tf

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        with strategy.scope():
            model = build(keras_xla.XLAModel)
        short = BATCH // 2 if args.uneven else 0

        def shard(context):
            index = context.input_pipeline_id
            mine = rows - (short if index == 1 else 0)
            batches = tf.data.Dataset.from_tensor_slices(data(mine, index))
            return batches.batch(BATCH)

        dataset = strategy.distribute_datasets_from_function(shard)
        model.fit(dataset, epochs=args.epochs, verbose=0, callbacks=callbacks)
    print(json.dumps({"epochs": epochs, "spent": spent}), flush=True)


def run_job(engine, args, bare=False):
    """Both workers of one job (without the tuner where `bare`); their
    last lines, by index."""
    log_dir = tempfile.mkdtemp(prefix=f"job-{engine}-")
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for index in range(2):
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("TF_CONFIG", "XLA_FLAGS", "TF_XLA_FLAGS")
        }
        if engine == "tf":
            env["TF_CONFIG"] = json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": index}}
            )
        command = [
            sys.executable, HERE, "--worker", str(index),
            "--engine", engine, "--log-dir", log_dir,
            "--port", str(ports[0]), "--epochs", str(args.epochs),
            "--steps", str(args.steps),
        ] + (["--uneven"] if args.uneven else []) + (
            ["--bare"] if bare else []
        )  # fmt: skip
        procs.append(
            subprocess.Popen(
                command,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            sys.exit(f"a {engine} worker failed:\n{stderr[-3000:]}")
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    return log_dir, outs


def show(engine, log_dir, outs):
    from keras_xla import cli

    chief = outs[0]
    spent = chief["spent"]
    epoch = statistics.median(chief["epochs"])
    total = spent["gather"] + spent["build"] + spent["write"]
    wait = spent["gather"] - spent["read"]
    share = total / len(chief["epochs"]) / epoch
    name = {"tf": "TensorFlow MultiWorkerMirroredStrategy", "jax": "JAX"}
    print(f"== {name[engine]}: 2 workers, {len(chief['epochs'])} epochs")
    print(
        "median epoch, by worker: "
        + ", ".join(f"{statistics.median(o['epochs']):.3f} s" for o in outs)
    )
    print(
        f"the chief's job report: {total * 1000:.1f} ms in all = reading "
        f"the reports {spent['read'] * 1000:.1f} ms + waiting for the "
        f"other's final one {wait * 1000:.1f} ms + building "
        f"{spent['build'] * 1000:.1f} ms + writing "
        f"{spent['write'] * 1000:.1f} ms"
    )
    print(
        f"per epoch: {total / len(chief['epochs']) * 1000:.1f} ms, "
        f"{share:.2%} of the median epoch (goal: under 1%)"
    )
    print("")
    print(f"$ keras-xla report {log_dir}")
    sys.stdout.flush()
    cli.main(["report", log_dir])
    print("")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--engine", choices=["tf", "jax", "both"], default="both"
    )
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--uneven", action="store_true")
    parser.add_argument(
        "--without-tuner",
        action="store_true",
        help="also run each job without the tuner, for its epoch time",
    )
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker", type=int, default=None)
    parser.add_argument("--log-dir")
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    if args.worker is not None:
        args.index = args.worker
        worker(args)
        return
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; {args.steps} steps an epoch per "
        f"worker, batch {BATCH} per worker"
        + (
            ", worker 1's TensorFlow shard half a batch short"
            if args.uneven
            else ""
        )
    )
    engines = ["tf", "jax"] if args.engine == "both" else [args.engine]
    for engine in engines:
        show(engine, *run_job(engine, args))
        if args.without_tuner:
            _, outs = run_job(engine, args, bare=True)
            print(
                "the same job without the tuner, median epoch by worker: "
                + ", ".join(
                    f"{statistics.median(o['epochs']):.3f} s" for o in outs
                )
            )
            print("")


if __name__ == "__main__":
    main()
