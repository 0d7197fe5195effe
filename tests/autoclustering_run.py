"""Child process for the auto-clustering tests: TF_XLA_FLAGS must be set
before TensorFlow starts. Prints the tuner's and the profiler's counts as
JSON. Run: python tests/autoclustering_run.py LOG_DIR [auto]"""

import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(__file__))

import keras_xla  # noqa: E402, I001  (first: before TensorFlow starts)
import tensorflow as tf  # noqa: E402
from conftest import conv_model, regression_data  # noqa: E402

from keras_xla.tf_backend.profiler import read_compile_events  # noqa: E402


def main():
    log_dir = sys.argv[1]
    tf.config.optimizer.set_jit(True)
    if sys.argv[2:] == ["auto"]:
        return trial(log_dir)
    x, y = regression_data(20)  # batches of 8, 8, 4
    model = conv_model(jit_compile=False)
    tuner = keras_xla.XLATuner(
        jit_compile=None, verbose=0, analyze_hlo=False, keep=True
    )
    tf.profiler.experimental.start(log_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(
            x,
            y,
            batch_size=8,
            epochs=3,
            verbose=0,
            callbacks=[tuner],
            validation_data=(x[:12], y[:12]),
        )
    tf.profiler.experimental.stop()
    report = tuner.report
    from keras_xla.tf_backend import autoclustering, compile_ledger
    from keras_xla.tf_backend.input_wait import SCOPE

    ledger = compile_ledger.status().directory
    clustered = {
        op
        for path in compile_ledger.entries(ledger)
        for op in autoclustering.read_cluster(path)[1]
    }
    print(
        json.dumps(
            {
                "profiler": len(read_compile_events(log_dir)),
                "tuner": report.total_compilations,
                "epochs": [e.compilations for e in report.epochs],
                "clustering": report.clustering.to_dict(),
                "recompilations": [
                    [r.function, r.epoch, r.cause, r.before, r.after]
                    for r in report.recompilations
                ],
                "codes": report.finding_codes(),
                "jit": report.jit.reason,
                "summary": report.summary(),
                "clustered_ops": len(clustered),
                "clustered_stamps": sorted(o for o in clustered if SCOPE in o),
                "input_ms": [e.input_ms_median for e in report.epochs],
            }
        )
    )


def trial(log_dir):
    """jit_compile="auto" with set_jit(True): auto-clustering is one of the
    trial's candidates."""
    x, y = regression_data(8 * 40)
    model = conv_model(jit_compile=False)
    tuner = keras_xla.XLATuner(
        jit_compile="auto",
        verbose=0,
        analyze_hlo=False,
        trial_memory=False,
        keep=True,
    )
    tf.profiler.experimental.start(log_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[tuner])
    tf.profiler.experimental.stop()
    report = tuner.report
    d = report.decision
    print(
        json.dumps(
            {
                "status": d.status,
                "winner": d.winner,
                "candidates": [c.name for c in d.candidates],
                "timed": [c.measured_steps for c in d.candidates],
                "dropped": [c.dropped_because for c in d.candidates],
                "profiler": len(read_compile_events(log_dir)),
                "tuner": report.total_compilations,
                "mode": report.clustering.mode,
                "set_jit": tf.config.optimizer.get_jit(),
                "iterations": int(model.optimizer.iterations.numpy()),
                "jit": bool(model.jit_compile),
            }
        )
    )


if __name__ == "__main__":
    main()
