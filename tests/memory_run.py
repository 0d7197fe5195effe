"""One fit with XLATuner(jit_compile="auto") in its own process, for the
remembered-decision tests: a later process must find the decision an
earlier one kept. Prints the decision as JSON on its last line.

Run: KERAS_XLA_CACHE_DIR=DIR python memory_run.py BATCH_SIZE
"""

import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
warnings.simplefilter("ignore")

import keras_xla  # noqa: E402, I001  (first: before TensorFlow starts)
from conftest import conv_model, no_payback_rule, regression_data  # noqa: E402


def main():
    no_payback_rule()  # 40 steps: XLA must still be tried, to remember
    batch = int(sys.argv[1])
    x, y = regression_data(batch * 40)
    model = conv_model(jit_compile=False)
    tuner = keras_xla.XLATuner(
        jit_compile="auto", verbose=0, analyze_hlo=False, keep=True
    )
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, callbacks=[tuner])
    d = tuner.report.decision
    print(
        json.dumps(
            {
                "status": d.status,
                "winner": d.winner,
                "reason": d.reason,
                "trial_steps": d.trial_steps,
                "iterations": int(model.optimizer.iterations.numpy()),
                "jit": bool(model.jit_compile),
                "steps": tuner.report.epochs[0].steps,
            }
        )
    )


if __name__ == "__main__":
    main()
