"""One worker of a two-worker job under XLATuner, in its own process.

Usage:
    python job_run.py tf LOG_DIR DUMP_DIR [uneven|killed|baseline|auto]
        (TF_CONFIG set)
    python job_run.py jax LOG_DIR INDEX PORT [on|auto|differ]

TensorFlow: `MultiWorkerMirroredStrategy` (TF_CONFIG from the caller),
an `XLAModel`, each worker's own data (`distribute_datasets_from_function`):
32 examples in batches of 8, or 28 on worker 1 with `uneven` (its last
batch is short); with `killed`, worker 1 dies as its training ends,
before its tuner writes its final report (the engine lets the chief go
on then: no collective is left), and the chief waits 3 s for it; with
`baseline`, 64 examples each and the tuner's no-XLA baseline windows on
(the others run without them); with `auto`, `jit_compile="auto"`
(a job skips the trial on every worker). JAX:
`jax.distributed.initialize` on 127.0.0.1 with gloo collectives and
`keras.distribution.DataParallel`, each process its own rows of the
global batch; with `differ`, worker 1's model computes with another
activation (the same collectives, another program). Prints the worker's
counts and, on the chief, the job report, as JSON on its last line.
Ground truth: on TensorFlow the HLO modules XLA dumped
(`--xla_dump_to=DUMP_DIR`: TensorFlow's profiler aborts at its stop
under this strategy, TF 2.21); on JAX its compile events.
"""

import json
import os
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
warnings.simplefilter("ignore")

ENGINE = sys.argv[1]
if ENGINE == "jax":
    os.environ["KERAS_BACKEND"] = "jax"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{sys.argv[4]}",
        num_processes=2,
        process_id=int(sys.argv[3]),
    )
else:
    os.environ["KERAS_BACKEND"] = "tensorflow"
    os.environ["XLA_FLAGS"] = f"--xla_dump_to={sys.argv[3]}"

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_xla  # noqa: E402, I001  (before TensorFlow runs an op)

UNEVEN = sys.argv[-1] == "uneven"
BASELINE = sys.argv[-1] == "baseline"
AUTO = sys.argv[-1] == "auto"


def data(rows):
    rng = np.random.default_rng(0)
    x = rng.random((rows, 16, 4), dtype=np.float32)
    return x, rng.random((rows, 1), dtype=np.float32)


def build(cls, activation="relu"):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((16, 4))
    h = keras.layers.Conv1D(8, 3, activation=activation)(inputs)
    h = keras.layers.GlobalAveragePooling1D()(h)
    model = cls(inputs, keras.layers.Dense(1)(h))
    model.compile(keras.optimizers.SGD(0.05), "mse", jit_compile=True)
    return model


def summary(tuner, out):
    report = tuner.report
    out["worker"] = report.worker
    out["compilations"] = report.total_compilations
    out["jit"] = report.jit.enabled
    out["decision"] = report.decision.status if report.decision else None
    out["baseline"] = report.baseline.to_dict() if report.baseline else None
    out["shapes"] = sorted(
        json.dumps(c.shapes, sort_keys=True) for c in report.compile_log
    )
    out["fingerprints"] = [c.fingerprint for c in report.compile_log]
    job = os.path.join(sys.argv[2], "xla_job_report.json")
    if report.worker and report.worker["index"] == 0:
        with open(job, encoding="utf-8") as f:
            out["job"] = json.load(f)
    print(json.dumps(out))


def tuner_worker_index():
    return json.loads(os.environ["TF_CONFIG"])["task"]["index"]


class DieAtTrainEnd(keras.callbacks.Callback):
    """The process dies as training ends, before the callbacks after it
    (the tuner) run: its final report is never written."""

    def on_train_end(self, logs=None):
        sys.stdout.flush()
        os._exit(3)


def tensorflow_worker():
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = build(keras_xla.XLAModel)

    def shard(context):
        # Each worker's own rows, in batches of 8 per replica.
        worker = context.input_pipeline_id
        rows = 28 if UNEVEN and worker == 1 else 64 if BASELINE else 32
        return tf.data.Dataset.from_tensor_slices(data(rows)).batch(8)

    dataset = strategy.distribute_datasets_from_function(shard)
    tuner = keras_xla.XLATuner(
        log_dir=sys.argv[2],
        verbose=0,
        baseline=BASELINE,
        analyze_hlo=False,
        jit_compile="auto" if AUTO else True,
    )
    callbacks = [tuner]
    if sys.argv[-1] == "killed":
        from keras_xla.core import workers

        workers.GATHER_SECONDS = 3.0
        if tuner_worker_index() == 1:
            callbacks.insert(0, DieAtTrainEnd())
    model.fit(dataset, epochs=2, verbose=0, callbacks=callbacks)
    dumped = [
        name
        for name in os.listdir(sys.argv[3])
        if name.endswith(".before_optimizations.txt")
    ]
    out = {"dumped": len(dumped), "dumped_names": sorted(dumped)}
    out["weights"] = [w.tolist() for w in model.get_weights()]
    summary(tuner, out)


def jax_worker():
    events = []

    def compiled(event, seconds, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            events.append(kwargs.get("fun_name"))

    jax.monitoring.register_event_duration_secs_listener(compiled)
    distribution = keras.distribution.DataParallel()
    distribution.auto_shard_dataset = False
    keras.distribution.set_distribution(distribution)
    differ = sys.argv[-1] == "differ" and jax.process_index() == 1
    model = build(keras.Model, "tanh" if differ else "relu")
    x, y = data(320)  # 20 steps an epoch: room for the baseline windows
    auto = sys.argv[-1] == "auto"
    tuner = keras_xla.XLATuner(
        log_dir=sys.argv[2], verbose=0, jit_compile="auto" if auto else True
    )
    model.fit(
        x, y, batch_size=16, epochs=1, shuffle=False, verbose=0,
        callbacks=[tuner],
    )  # fmt: skip
    out = {"events": events.count("jit(train_step)")}
    summary(tuner, out)


if __name__ == "__main__":
    tensorflow_worker() if ENGINE == "tf" else jax_worker()
