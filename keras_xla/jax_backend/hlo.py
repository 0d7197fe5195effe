"""The train step's optimized HLO on JAX, at no extra compilation.

Keras's JAX trainer keeps the jitted train step in its train function's
closure. Lowering it again with the `ShapeDtypeStruct`s of a call it
already compiled and compiling that hits JAX's in-memory cache (no compile
event, no seconds): the executable XLA runs, whose `cost_analysis()`
gives the FLOPs and whose `as_text()` gives the optimized module. The
module's kernels are counted from the text: each instruction of the entry
computation (and of the computations its loops and calls run) that does
work is one kernel; a `fusion` runs the ops of its fused computation.
A kernel that runs one compute op is unfused; the largest by output bytes
are listed, as on TensorFlow.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import re
import time
import types
from typing import Any

from keras_xla.core import hardware, peaks
from keras_xla.core.figures import rounded
from keras_xla.core.report import HloSection
from keras_xla.jax_backend import environment
from keras_xla.jax_backend.tap import untapped

logger = logging.getLogger(__name__)

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
_ARRAY = re.compile(r"^([a-z]+\d*)\[([\d,]*)\]")
# Bytes per element of HLO's element types.
ELEMENT_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2}
ELEMENT_BYTES |= {"bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8}
ELEMENT_BYTES |= {"u64": 8, "f64": 8, "c64": 8, "c128": 16}
# Where the module's text goes in the log dir (as on TensorFlow).
TEXT_PATH = os.path.join("hlo", "train_step.optimized.txt")


def jitted_step(model: Any) -> Any:
    """The `jax.jit` object the model's train function calls, or None."""
    return _jitted(untapped(getattr(model, "train_function", None)))


def _jitted(fn: Any, depth: int = 2) -> Any:
    """The `jax.jit` object in `fn`'s closure, or in that of a function
    it calls `depth` levels down (the per-shape switch's XLA side, tapped
    for buckets)."""
    cells = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:
            continue
    for value in cells:
        if hasattr(value, "lower") and hasattr(value, "trace"):
            return value
    if depth:
        for value in cells:
            if isinstance(value, types.FunctionType):
                found = _jitted(value, depth - 1)
                if found is not None:
                    return found
    return None


def state_specs(model: Any) -> Any:
    """`ShapeDtypeStruct`s of the train step's state, from the model's
    variables (their values are Keras's loop's during an epoch: it holds
    the state apart); with their shardings only under a
    `keras.distribution` over several devices: on one device the step was
    called with uncommitted arrays, and a sharding in the specs would make
    another compilation. None where a sharding cannot be read now."""
    import jax
    import jax.numpy as jnp

    def spec(v):
        value = getattr(v, "_value", None)
        if value is not None:
            sharding = value.sharding if sharded else None
            return jax.ShapeDtypeStruct(
                value.shape, value.dtype, sharding=sharding
            )
        if sharded:
            raise LookupError(v.path)
        # As JAX holds it (an int64 is an int32 without x64).
        dtype = jax.dtypes.canonicalize_dtype(jnp.dtype(v.dtype))
        return jax.ShapeDtypeStruct(tuple(v.shape), dtype)

    sharded = environment.device_count() > 1
    groups = (
        model.trainable_variables,
        model.non_trainable_variables,
        model.optimizer.variables,
        model.metrics_variables,
    )
    try:
        # The structure Keras passes its step (`_get_jax_state`'s).
        return tuple([spec(v) for v in group] for group in groups)
    except LookupError:
        return None


def program(jitted: Any, state: Any, data: Any) -> tuple[str, int | None]:
    """The fingerprint and the memory of the program `jitted` runs on
    `(state, data)` specs. The fingerprint is a hash of its lowered
    module's text (without locations, so the same program has the same
    one on every machine); the memory is what XLA assigned it
    (`memory_analysis()`: arguments, outputs and temporaries, less the
    outputs that reuse an argument's buffer). A program the step
    compiled comes from JAX's cache: nothing compiles."""
    lowered = jitted.lower(state, data)
    text = lowered.as_text()
    fingerprint = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    memory = lowered.compile().memory_analysis()
    if memory is None:
        return fingerprint, None
    total = (
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        + memory.temp_size_in_bytes
        - memory.alias_size_in_bytes
    )
    return fingerprint, int(total) or None


def parse_computations(text: str) -> tuple[str | None, dict[str, list]]:
    """The entry computation's name and each computation's instructions
    as `(opcode, called computations, name, shape)`."""
    computations: dict[str, list] = {}
    entry, current = None, None
    for line in text.splitlines():
        match = _COMPUTATION.match(line)
        if match:
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
                (
                    match.group(3),
                    _CALLED.findall(line),
                    match.group(1),
                    re.sub(r"\{[^}]*\}", "", match.group(2)),
                )
            )
    return entry, computations


def count_kernels(text: str) -> dict:
    """Kernels, fusions, fused and compute ops, converts of a module."""
    entry, computations = parse_computations(text)

    def inner(called: list) -> list[str]:
        """The compute opcodes of the computations a fusion calls."""
        return [
            op
            for c in called
            for op, _, _, _ in computations.get(c, ())
            if op not in NO_OP_OPCODES
        ]

    def ops(name: str) -> int:
        """Compute ops `name` runs, those of the fusions it calls too."""
        return sum(
            sum(ops(c) for c in called) if opcode == "fusion" else 1
            for opcode, called, _, _ in computations.get(name, ())
            if opcode not in NO_OP_OPCODES
        )

    counts = {"kernels": 0, "fusions": 0, "fused": 0, "compute": 0}
    counts.update(converts=0, unfused_converts=0)
    unfused: list[tuple[int, str]] = []

    def visit(name: str, seen: frozenset) -> None:
        for opcode, called, label, shape in computations.get(name, ()):
            if opcode in CONTROL_FLOW_OPCODES:
                for c in called:
                    if c not in seen:
                        visit(c, seen | {c})
                continue
            if opcode in NO_OP_OPCODES:
                continue
            fusion = opcode == "fusion"
            run = inner(called) if fusion else [opcode]
            size = sum(ops(c) for c in called) if fusion else 1
            converts = run.count("convert")
            counts["kernels"] += 1
            counts["compute"] += size
            counts["converts"] += converts
            if size >= 2:
                counts["fusions"] += 1
                counts["fused"] += size
            else:  # one compute op (a single-op fusion: its op's)
                counts["unfused_converts"] += converts
                op = run[0] if run else opcode
                unfused.append((shape_bytes(shape), f"{op} {label} {shape}"))

    if entry is not None:
        visit(entry, frozenset({entry}))
    unfused.sort(key=lambda found: found[0], reverse=True)
    counts["largest_unfused"] = [text for _, text in unfused[:TOP_UNFUSED]]
    return counts


TOP_UNFUSED = 5  # entries in `largest_unfused`, as on TensorFlow


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO array shape's text (`"f32[16,8]"`); 0 for a tuple
    or a token."""
    match = _ARRAY.match(shape)
    if match is None:
        return 0
    size = ELEMENT_BYTES.get(match.group(1), 0)
    for dim in filter(None, match.group(2).split(",")):
        size *= int(dim)
    return size


def peak_flops(setting: Any, dtype: str) -> float | None:
    """The peak for the utilization figure: `XLATuner(peak_flops=...)`'s
    number; with `"measure"` a matmul chain's FLOP/s in `dtype` under
    `jax.jit` (one small compilation, kept for this machine: later runs
    read it); with None the peak an earlier measurement kept (`core.peaks`,
    as on TensorFlow)."""
    if setting == "measure":
        key = machine_key(dtype)
        return peaks.measured(key, lambda: measure_peak_flops(dtype))
    if setting:
        return float(setting)
    return peaks.known(machine_key(dtype))


def add_rates(
    section: HloSection, median_ms: float | None, setting: Any, dtype: str
) -> None:
    """The achieved TFLOP/s at the epoch's median step and, given a peak
    (`peak_flops(setting, dtype)`), the utilization."""
    if not (median_ms and section.flops_per_step):
        return
    achieved = section.flops_per_step / (median_ms / 1000.0)
    section.achieved_tflops = rounded(achieved / 1e12)
    try:
        peak = peak_flops(setting, dtype)
    except Exception as error:  # noqa: BLE001 - a diagnostic
        peak = None
        logger.info("No peak FLOP/s on JAX: %s", error)
    if peak:
        section.peak_tflops = rounded(peak / 1e12)
        section.utilization = rounded(achieved / peak)


def machine_key(dtype: str) -> str:
    """What a measured peak is valid for: processor, JAX's devices, JAX
    and the dtype."""
    import jax

    devices = ",".join(f"{d.platform}:{d.id}" for d in jax.devices())
    model = hardware.cpu_model() or platform.machine()
    return f"{model}|{devices}|jax {jax.__version__}|{dtype}"


def measure_peak_flops(
    dtype: str, size: int = 512, matmuls: int = 8, repeats: int = 5
) -> float:
    """Matmul FLOP/s this device reaches in `dtype` under XLA: a chain of
    `matmuls` `[size, size]` products, its fastest of `repeats` runs
    after the compiling one (TensorFlow's probe, on JAX)."""
    import jax
    import jax.numpy as jnp

    scale = 1.0 / size**0.5  # chained products keep their magnitude
    keys = jax.random.split(jax.random.PRNGKey(0))
    a = (jax.random.normal(keys[0], (size, size)) * scale).astype(dtype)
    b = (jax.random.normal(keys[1], (size, size)) * scale).astype(dtype)

    @jax.jit
    def chain(x, w):
        for _ in range(matmuls):
            x = jnp.matmul(x, w)
        return x

    chain(a, b).block_until_ready()  # compiles
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        chain(a, b).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 * matmuls / best


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
        fusion_ratio=rounded(counts["fused"] / max(counts["compute"], 1)),
        converts=counts["converts"],
        unfused_converts=counts["unfused_converts"],
        flops_per_step=flops,
        largest_unfused=counts["largest_unfused"],
        achieved_tflops=None,
        peak_tflops=None,
        utilization=None,
        source="JAX's in-memory cache",
    )
    return section, text
