"""Two runs side by side: `keras-xla report A B`.

Each row holds both runs' values, `B / A` and which run is better (fewer
compilations, a shorter step, more examples per second), and a one-line
conclusion says which trains faster and by how much.

Pure logic: nothing here imports TensorFlow or Keras.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from keras_xla.core import figures
from keras_xla.core.render import format_table, number
from keras_xla.core.report import XLAReport

# Comparison rows (key, label, `Figure.better`, `Figure.digits`): the
# run's size, the figures of `core.figures` that compare, the verdict.
COMPARED = (
    ("epochs", "epochs", 0, None),
    ("steps", "train steps", 0, None),
    *((f.key, f.label or f.key, f.better, f.digits) for f in figures.COMPARED),
    ("speedup", "verdict: XLA speedup", 0, 2),
)


def run_totals(report: XLAReport) -> dict[str, float | None]:
    """Per-run totals: each compared figure over the epochs (`Figure.over`)."""
    epochs = report.epochs
    totals = {"epochs": len(epochs), "steps": sum(e.steps for e in epochs)}
    for f in figures.COMPARED:
        totals[f.key] = f.over(epochs)
    totals["speedup"] = report.verdict.speedup if report.verdict else None
    return totals


def compare(first: XLAReport, second: XLAReport, labels=("A", "B")) -> dict:
    """The comparison as data: rows by key, the labels, the conclusion."""
    totals = run_totals(first), run_totals(second)
    rows = {}
    for key, label, direction, _ in COMPARED:
        a, b = totals[0][key], totals[1][key]
        better = None
        if direction and a is not None and b is not None and a != b:
            better = labels[(b > a) == (direction > 0)]
        rows[key] = {"label": label, "values": [a, b], "ratio": _ratio(a, b)}
        rows[key]["better"] = better
    return {
        "labels": list(labels),
        "rows": rows,
        "conclusion": _conclude(rows, labels),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    """`b / a` to 4 decimals; None when either is missing, `a` is 0 or
    the quotient is not a finite number."""
    if not a or b is None:
        return None
    try:
        ratio = round(b / a, 4)
    except OverflowError:  # Integers too large for a float quotient.
        return None
    return ratio if math.isfinite(ratio) else None


def _conclude(rows: dict, labels) -> str:
    steady = rows[figures.THROUGHPUT.key]
    overall = rows[figures.THROUGHPUT_OVERALL.key]
    if steady["ratio"] is None or steady["ratio"] <= 0:
        return "No steady throughput to compare."
    faster = labels[1] if steady["ratio"] > 1 else labels[0]
    times = steady["ratio"] if steady["ratio"] > 1 else 1 / steady["ratio"]
    text = f"{faster} trains faster: {times:.2f}x the steady examples/s"
    if overall["ratio"] and overall["ratio"] > 0:
        o = overall["ratio"] if faster == labels[1] else 1 / overall["ratio"]
        text += f", {o:.2f}x including compile time"
    a, b = rows[figures.COMPILATIONS.key]["values"]
    if a != b:
        text += f"; compilations {a} vs {b}"
    return text + "."


def comparison(runs: Sequence[tuple[XLAReport, str]], labels=None) -> str:
    """The comparison as text (`compare`); `labels` default to `A`, `B`."""
    (first, first_path), (second, second_path) = runs
    labels = tuple(labels or ("A", "B"))
    result = compare(first, second, labels)
    lines = [f"{labels[0]}: {first_path}", f"{labels[1]}: {second_path}"]
    lines += [
        "(median step ms and examples/s: medians over epochs)",
        *(
            f"{label} verdict: {r.verdict.headline}"
            for label, r in zip(labels, (first, second))
            if r.verdict is not None
        ),
        "",
    ]
    mode = [
        ("on" if r.jit.enabled else "off") if r.jit else "-"
        for r in (first, second)
    ]
    table = [("", *labels, f"{labels[1]}/{labels[0]}", "better")]
    table.append(("XLA", *mode, "", ""))
    for key, label, _, digits in COMPARED:
        row = result["rows"][key]
        cells = [
            str(v) if digits is None and v is not None else number(v, digits)
            for v in row["values"]
        ]
        table.append((label, *cells, number(row["ratio"]), row["better"] or ""))
    lines += format_table(table)
    lines += ["", result["conclusion"]]
    return "\n".join(lines)
