"""XLAModel vs keras.Model, both with XLA on one device, side by side.

XLAModel compiles the forward and backward pass per replica and applies
the optimizer outside the XLA cluster; plain Keras compiles the whole step,
optimizer included. This measures what that design costs on one device,
timed in rounds of short `fit` calls (see `paired.py` for the method).

Run: python benchmarks/xlamodel_step.py [--rounds 40] [--steps 100]
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from paired import conv_dataset, report, time_pairs  # noqa: E402
from tuner_overhead import make_model  # noqa: E402

from keras_xla import XLAModel  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    ds = conv_dataset(args.batch_size)
    plain, xla = make_model(), make_model(XLAModel)
    common = dict(
        epochs=1, steps_per_epoch=args.steps, verbose=0, shuffle=False
    )
    times = time_pairs(
        {
            "keras.Model": lambda cbs: plain.fit(ds, callbacks=cbs, **common),
            "XLAModel": lambda cbs: xla.fit(ds, callbacks=cbs, **common),
        },
        args.rounds,
    )
    print(
        f"steps per fit: {args.steps}, rounds: {args.rounds}, "
        f"batch size: {args.batch_size}"
    )
    report(times, args.steps, "keras.Model", "XLAModel")


if __name__ == "__main__":
    main()
