"""The train step's optimized HLO on JAX, at no extra compilation.

Keras's JAX trainer keeps the jitted train step in its train function's
closure. Lowering it again with the `ShapeDtypeStruct`s of a call it
already compiled and compiling that hits JAX's in-memory cache (no compile
event, no seconds): the executable XLA runs, whose `cost_analysis()`
gives the FLOPs and whose `as_text()` gives the optimized module. The
module's kernels are counted from the text: each instruction of the entry
computation (and of the computations its loops and calls run) that does
work is one kernel; a `fusion` runs the ops of its fused computation.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from keras_xla.core.report import HloSection
from keras_xla.jax_backend.tap import untapped

NO_OP_OPCODES = frozenset(
    "parameter constant tuple get-tuple-element bitcast after-all"
    " add-dependency opt-barrier domain partition-id replica-id async-update"
    " async-done copy-start copy-done".split()
)
CONTROL_FLOW_OPCODES = frozenset("while conditional call async-start".split())
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")  # unindented
_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(\S+(?:\s*\{[^}]*\})?|\([^)]*\))"
    r"\s+([\w\-]+)\("
)
_CALLED = re.compile(r"(?:calls|body|condition|to_apply)=%?([\w.\-]+)")


# Where the module's text goes in the log dir (as on TensorFlow).
TEXT_PATH = os.path.join("hlo", "train_step.optimized.txt")


def jitted_step(model: Any, function: str = "train") -> Any:
    """The `jax.jit` object the model's step function calls, or None."""
    fn = untapped(getattr(model, f"{function}_function", None))
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if hasattr(value, "lower") and hasattr(value, "trace"):
            return value
    return None


def state_specs(model: Any, sharded: bool) -> Any:
    """`ShapeDtypeStruct`s of the train step's state, from the model;
    with their shardings only under a `keras.distribution` (`sharded`):
    on one device the step was called with uncommitted arrays, and a
    sharding in the specs would make another compilation."""
    import jax

    state = model._get_jax_state(
        trainable_variables=True,
        non_trainable_variables=True,
        optimizer_variables=True,
        metrics_variables=True,
    )

    def spec(a):
        return jax.ShapeDtypeStruct(
            a.shape,
            a.dtype,
            sharding=getattr(a, "sharding", None) if sharded else None,
        )

    return jax.tree_util.tree_map(spec, state)


def parse_computations(text: str) -> tuple[str | None, dict[str, list]]:
    """The entry computation's name and each computation's instructions
    as `(opcode, called computations)`."""
    computations: dict[str, list] = {}
    entry, current = None, None
    for line in text.splitlines():
        match = _COMPUTATION.match(line)
        if match and not line[:1].isspace():
            current = match.group(2)
            computations[current] = []
            if match.group(1):
                entry = current
            continue
        if current is None:
            continue
        match = _INSTRUCTION.match(line)
        if match:
            computations[current].append(
                (match.group(3), _CALLED.findall(line))
            )
    return entry, computations


def count_kernels(text: str) -> dict:
    """Kernels, fusions, fused and compute ops, converts of a module."""
    entry, computations = parse_computations(text)

    def ops(name: str, seen: frozenset = frozenset()) -> int:
        total = 0
        for opcode, called in computations.get(name, ()):
            if opcode == "fusion":
                total += sum(ops(c, seen | {name}) for c in called)
            elif opcode not in NO_OP_OPCODES:
                total += 1
        return total

    counts = {"kernels": 0, "fusions": 0, "fused": 0, "compute": 0}
    counts.update(converts=0, unfused_converts=0)

    def visit(name: str, seen: frozenset) -> None:
        for opcode, called in computations.get(name, ()):
            if opcode in CONTROL_FLOW_OPCODES:
                for c in called:
                    if c not in seen:
                        visit(c, seen | {c})
                continue
            if opcode in NO_OP_OPCODES:
                continue
            counts["kernels"] += 1
            if opcode == "fusion":
                inside = sum(ops(c) for c in called)
                counts["compute"] += inside
                converts = sum(
                    1
                    for c in called
                    for op, _ in computations.get(c, ())
                    if op == "convert"
                )
                counts["converts"] += converts
                if inside >= 2:
                    counts["fusions"] += 1
                    counts["fused"] += inside
                else:
                    counts["unfused_converts"] += converts
            else:
                counts["compute"] += 1
                if opcode == "convert":
                    counts["converts"] += 1
                    counts["unfused_converts"] += 1

    if entry is not None:
        visit(entry, frozenset({entry}))
    return counts


def analyze(
    jitted: Any, state: Any, data: Any, epoch: int, shapes: dict
) -> tuple[HloSection, str]:
    """The HLO section of `jitted` on `(state, data)` specs, and its text.
    Compiles nothing new when those specs were compiled already."""
    start = time.perf_counter()
    compiled = jitted.lower(state, data).compile()
    text = compiled.as_text()
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    flops = int(float((cost or {}).get("flops", 0.0)))
    counts = count_kernels(text)
    section = HloSection(
        epoch=epoch,
        shapes=shapes,
        analysis_seconds=round(time.perf_counter() - start, 4),
        kernels_per_step=counts["kernels"],
        fusions=counts["fusions"],
        fusion_ratio=(
            round(counts["fused"] / counts["compute"], 4)
            if counts["compute"]
            else 0.0
        ),
        converts=counts["converts"],
        unfused_converts=counts["unfused_converts"],
        flops_per_step=flops,
        largest_unfused=[],
        achieved_tflops=None,
        peak_tflops=None,
        utilization=None,
        source="JAX's in-memory cache",
    )
    return section, text
