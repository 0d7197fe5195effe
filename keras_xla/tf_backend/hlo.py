"""HloModuleProto analysis: kernels, fusion, precision casts and FLOPs.

`compiler_ir()` gets the HLO of a jit-compiled function for concrete
tensors; `analyze()`, a pure function of protos, turns it into `HloStats`.

- *Compute op*: an instruction whose opcode is in neither `NO_OP_OPCODES`
  nor `CONTROL_FLOW_OPCODES` (whose computations are walked instead).
- *Kernel*: a compute op reached from the entry computation, directly or
  through control flow, outside any fusion: one launch of work. Kernels
  made only of the tuner's shape probe ops (name scope `PROBE_SCOPE`)
  are left out: they are the tuner's work, not the model's. A fusion
  runs the compute ops of its fused computation (nested fusions unpacked;
  `to_apply` reducers and comparators belong to their op).
- *Fused op*: a compute op whose kernel runs at least two. XLA:CPU wraps
  a lone op in a single-op fusion (`wrapped_exponential`).
- *Per step*: a `while` body counts once per iteration (its condition once
  more) when XLA recorded `known_trip_count` in its backend config, else
  once; each `conditional` branch counts once (an upper bound).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from keras_xla.core import files

if TYPE_CHECKING:
    from tensorflow.compiler.xla.service import hlo_pb2

NO_OP_OPCODES = frozenset(
    "parameter constant tuple get-tuple-element bitcast after-all"
    " add-dependency opt-barrier domain partition-id replica-id async-update"
    " async-done".split()
)
CONTROL_FLOW_OPCODES = frozenset("while conditional call async-start".split())
# What `instruction_flops` counts: the only opcodes whose operands are read.
FLOP_OPCODES = frozenset(("dot", "convolution"))
_LOCAL = 0xFFFFFFFF  # the local part of an instruction id
# The name scope of the tuner's shape probe: kernels made only of its ops
# are the tuner's, not the model's, and are left out of the statistics.
PROBE_SCOPE = "keras_xla_probe"
SERIALIZED_STAGES = ("hlo_serialized", "optimized_hlo_serialized")
TEXT_STAGES = ("hlo", "optimized_hlo", "optimized_hlo_dot")


@dataclasses.dataclass(frozen=True)
class UnfusedOp:
    """A kernel that runs one compute op: its `opcode` (the wrapped op's for
    a single-op fusion), the kernel's `name`, output `shape` as HLO text
    writes it (`"f32[16,8]"`), output `bytes` and `flops`."""

    opcode: str
    name: str
    shape: str
    bytes: int
    flops: int


@dataclasses.dataclass(frozen=True)
class HloStats:
    """What XLA made of one step; the module docstring defines the terms.

    Attributes:
        kernels_per_step: Kernels launched per step.
        fusions: Kernels per step that are fusions (single-op ones too).
        single_op_fusions: Fusions per step that wrap one compute op.
        compute_ops: Compute ops run per step, fusion bodies unpacked.
        fused_ops: Fused ops per step.
        fusion_ratio: `fused_ops / compute_ops` (0.0 without compute ops),
            the share of compute ops that share a kernel with another op:
            1.0 when all fused, lower for each op left alone.
        unoptimized_ops: Compute ops of the unoptimized module, each loop
            body once (it records no trip counts); `None` without it.
        converts: `convert` ops (precision casts) per step.
        unfused_converts: Of `converts`, those alone in their kernel.
        flops: FLOPs per step of all `dot`s and `convolution`s, fused or
            not (multiply-add = 2, see `instruction_flops()`).
        largest_unfused: Unfused kernels, largest output bytes first.
        unknown_trip_counts: `while` loops with no known trip count.
    """

    kernels_per_step: int
    fusions: int
    single_op_fusions: int
    compute_ops: int
    fused_ops: int
    fusion_ratio: float
    unoptimized_ops: int | None
    converts: int
    unfused_converts: int
    flops: int
    largest_unfused: tuple[UnfusedOp, ...]
    unknown_trip_counts: int


def parse_hlo_module(serialized: bytes) -> hlo_pb2.HloModuleProto:
    """Parses a serialized `HloModuleProto` (a `*_serialized` stage)."""
    from tensorflow.compiler.xla.service import hlo_pb2

    module = hlo_pb2.HloModuleProto()
    module.ParseFromString(serialized)
    return module


def program_fingerprint(module: hlo_pb2.HloModuleProto) -> str:
    """The fingerprint of an HLO module's program, the same in every
    process that lowers the same program: a hash of the module with its
    names, source metadata and schedule left out, and its computations'
    and instructions' ids (process-wide counters) renumbered in order."""
    canonical = type(module)()
    canonical.CopyFrom(module)
    computations = {c.id: i for i, c in enumerate(canonical.computations)}
    instructions = {
        inst.id: i
        for i, inst in enumerate(
            inst for c in canonical.computations for inst in c.instructions
        )
    }
    for field in ("name", "entry_computation_name", "id", "schedule"):
        canonical.ClearField(field)
    for field in ("host_program_shape", "stack_frame_index"):
        canonical.ClearField(field)
    canonical.entry_computation_id = computations.get(
        canonical.entry_computation_id, -1
    )
    for computation in canonical.computations:
        computation.ClearField("name")
        computation.ClearField("program_shape")
        computation.id = computations[computation.id]
        computation.root_id = instructions.get(computation.root_id, -1)
        for inst in computation.instructions:
            inst.ClearField("name")
            inst.ClearField("metadata")
            inst.id = instructions[inst.id]
            for ids, table in (
                (inst.operand_ids, instructions),
                (inst.control_predecessor_ids, instructions),
                (inst.called_computation_ids, computations),
            ):
                ids[:] = [table.get(i, -1) for i in ids]
    serialized = canonical.SerializeToString(deterministic=True)
    return hashlib.sha256(serialized).hexdigest()[:16]


def _compiler_ir_getter(fn: Callable[..., Any], args: tuple) -> Any:
    import tensorflow as tf

    python_function = getattr(fn, "python_function", fn)

    # A new jit function, as TF refuses one without jit_compile=True; the
    # *args signature because experimental_get_compiler_ir() does not fill
    # in default arguments (`tf.matmul` fails on `transpose_a`).
    @tf.function(jit_compile=True)
    def step(*tensors: Any) -> Any:
        return python_function(*tensors)

    return step.experimental_get_compiler_ir(*args)


def compiler_ir(
    fn: Callable[..., Any], *args: Any, stage: str = SERIALIZED_STAGES[1]
) -> hlo_pb2.HloModuleProto | str:
    """HLO of `fn` compiled by XLA for the tensors `args`, without running.

    `fn` (for a `tf.function`, its `python_function`) is traced anew under
    `tf.function(..., jit_compile=True)`.

    Args:
        fn: The step: a Python callable or a `tf.function`.
        *args: Tensors (not `TensorSpec`s) to compile for.
        stage: One of `SERIALIZED_STAGES`, returned as a parsed
            `HloModuleProto`, or `TEXT_STAGES`, returned as text. Defaults
            to `"optimized_hlo_serialized"`.
    """
    if stage not in SERIALIZED_STAGES + TEXT_STAGES:
        raise ValueError(
            f"Unsupported parameter value `compiler_ir(stage={stage!r})`. "
            f"Possible choices are: {SERIALIZED_STAGES + TEXT_STAGES}."
        )
    module = _compiler_ir_getter(fn, args)(stage=stage)
    return parse_hlo_module(module) if stage in SERIALIZED_STAGES else module


def analyze_function(fn: Callable[..., Any], *args: Any) -> HloStats:
    """`analyze()` of `fn`'s optimized and unoptimized HLO for `args`,
    from one trace of `fn`."""
    get_ir = _compiler_ir_getter(fn, args)
    optimized = parse_hlo_module(get_ir(stage="optimized_hlo_serialized"))
    unoptimized = parse_hlo_module(get_ir(stage="hlo_serialized"))
    return analyze(optimized, unoptimized)


def write_hlo_text(path: str, text: str) -> str:
    """Writes HLO text to `path` whole, creating its folder (never through
    a link); returns `path`. Inside a fit's `core.files.deferring`, it is
    written after the report JSON."""
    return files.write_later(path, text)


@dataclasses.dataclass(frozen=True)
class _Kernel:
    instruction: hlo_pb2.HloInstructionProto
    ops: tuple[hlo_pb2.HloInstructionProto, ...]
    times: int  # launches per step
    flops: int  # per launch

    def as_unfused_op(self) -> UnfusedOp:
        shape, op = self.instruction.shape, self.ops[0]
        return UnfusedOp(
            op.opcode,
            self.instruction.name,
            shape_text(shape),
            shape_bytes(shape),
            self.flops,
        )


def _known_trip_count(instruction: hlo_pb2.HloInstructionProto) -> int | None:
    try:
        config = json.loads(instruction.backend_config or b"{}")
        return int(config["known_trip_count"]["n"])
    except (ValueError, KeyError, TypeError):
        return None


def _kernels(module: hlo_pb2.HloModuleProto) -> tuple[list[_Kernel], int]:
    """The kernels of a module and the number of loops of unknown length."""
    computations = {c.id: c for c in module.computations}
    shape_of = _operand_shapes(computations.values())
    kernels: list[_Kernel] = []
    unknown = 0

    def fused_ops(computation_id: int) -> list[tuple[int, Any]]:
        ops = []
        for inst in computations[computation_id].instructions:
            if inst.opcode == "fusion":
                ops.extend(fused_ops(inst.called_computation_ids[0]))
            elif inst.opcode not in NO_OP_OPCODES:
                ops.append((computation_id, inst))
        return ops

    def visit(computation_id: int, times: int) -> None:
        nonlocal unknown
        for inst in computations[computation_id].instructions:
            called = list(inst.called_computation_ids)
            if inst.opcode == "while":  # called: (body, condition)
                trips = _known_trip_count(inst)
                unknown += trips is None
                visit(called[0], times * (trips or 1))
                visit(called[1], times * (trips + 1 if trips else 1))
            elif inst.opcode in CONTROL_FLOW_OPCODES:
                for computation_id in called:
                    visit(computation_id, times)
            elif inst.opcode not in NO_OP_OPCODES:
                ops = (
                    fused_ops(called[0])
                    if inst.opcode == "fusion"
                    else [(computation_id, inst)]
                )
                if all(PROBE_SCOPE in op.metadata.op_name for _, op in ops):
                    continue  # the tuner's probe, not the model's work
                flops = sum(
                    instruction_flops(
                        op, [shape_of(where, i) for i in op.operand_ids]
                    )
                    for where, op in ops
                    if op.opcode in FLOP_OPCODES
                )
                kernels.append(
                    _Kernel(inst, tuple(op for _, op in ops), times, flops)
                )

    visit(module.entry_computation_id, 1)
    return kernels, unknown


def _operand_shapes(computations) -> Callable[[int, int], Any]:
    """`shape_of(computation id, operand id)`: an operand's shape.

    A module XLA serialized with its executable numbers instructions
    `computation << 32 | local`, but may name an operand by the local
    part alone, or (in a computation it cloned, seen on a transformer
    with padded text) by an id whose upper part is another
    computation's. Looked up in the computation first, by the whole id
    and by its local part, then by the whole id anywhere in the module.
    Raises `KeyError` only for an id the module does not hold.
    """
    local, anywhere = {}, {}
    for c in computations:
        for i in c.instructions:
            anywhere.setdefault(i.id, i.shape)
            for key in (i.id, i.id & _LOCAL):
                local[c.id, key] = i.shape

    def shape_of(computation_id: int, operand_id: int) -> Any:
        for key in (operand_id, operand_id & _LOCAL):
            if (computation_id, key) in local:
                return local[computation_id, key]
        return anywhere[operand_id]

    return shape_of


def _element_type_name(shape: Any) -> str:
    field = shape.DESCRIPTOR.fields_by_name["element_type"]
    return field.enum_type.values_by_number[shape.element_type].name


def shape_bytes(shape: Any) -> int:
    """Bytes of an XLA `ShapeProto` (tuples summed, tokens 0)."""
    if shape.tuple_shapes:
        return sum(shape_bytes(s) for s in shape.tuple_shapes)
    name = _element_type_name(shape)
    bits = "8" if name == "PRED" else re.match(r"[A-Z]+(\d*)", name)[1]
    if not bits:  # TOKEN, OPAQUE_TYPE
        return 0
    return math.ceil(math.prod(shape.dimensions) * int(bits) / 8)


def shape_text(shape: Any) -> str:
    """An XLA `ShapeProto` as HLO text writes it, e.g. `f32[16,8]`."""
    if shape.tuple_shapes:
        return "(" + ", ".join(shape_text(s) for s in shape.tuple_shapes) + ")"
    dims = ",".join(str(d) for d in shape.dimensions)
    return f"{_element_type_name(shape).lower()}[{dims}]"


def _valid_taps(window_dim: Any, input_size: int, output_size: int) -> int:
    """(output position, kernel tap) pairs of one spatial dimension whose
    tap reads a real input element, not padding or a dilation hole."""
    stride = window_dim.stride or 1
    base_dilation = window_dim.base_dilation or 1
    last_input = (input_size - 1) * base_dilation
    taps = 0
    for k in range(window_dim.size):
        offset = k * (window_dim.window_dilation or 1) - window_dim.padding_low
        if base_dilation == 1:  # outputs o with 0 <= o*stride+offset <= last
            first = max(0, -(offset // stride))
            last = min(output_size - 1, (last_input - offset) // stride)
            taps += max(0, last - first + 1)
            continue
        for o in range(output_size):
            position = o * stride + offset
            if 0 <= position <= last_input and position % base_dilation == 0:
                taps += 1
    return taps


def instruction_flops(
    inst: hlo_pb2.HloInstructionProto, operand_shapes: list[Any]
) -> int:
    """FLOPs of a `dot` or `convolution`; 0 for any other opcode.

    dot: `2 * prod(output dims) * prod(lhs contracting dims)`. convolution:
    `2 * out batch * out features * kernel input features * prod(valid taps
    per spatial dim)`; the kernel's input features are per group, which
    covers `feature_group_count` and `batch_group_count`. Unpadded and
    undilated, this is `2 * prod(output dims) * prod(kernel spatial dims) *
    in features per group`; taps on padding or on base-dilation holes
    (input gradients of strided convolutions) are left out.
    """
    if inst.opcode == "dot":
        lhs = operand_shapes[0].dimensions
        numbers = inst.dot_dimension_numbers
        contracting = math.prod(
            lhs[d] for d in numbers.lhs_contracting_dimensions
        )
        return 2 * math.prod(inst.shape.dimensions) * contracting
    if inst.opcode != "convolution":
        return 0
    numbers = inst.convolution_dimension_numbers
    lhs, out = operand_shapes[0].dimensions, inst.shape.dimensions
    taps = 1
    for i, window_dim in enumerate(inst.window.dimensions):
        lhs_size = lhs[numbers.input_spatial_dimensions[i]]
        out_size = out[numbers.output_spatial_dimensions[i]]
        taps *= _valid_taps(window_dim, lhs_size, out_size)
    rhs = operand_shapes[1].dimensions
    per_output = rhs[numbers.kernel_input_feature_dimension] * taps
    batch = out[numbers.output_batch_dimension]
    return 2 * batch * out[numbers.output_feature_dimension] * per_output


def analyze(
    optimized: hlo_pb2.HloModuleProto,
    unoptimized: hlo_pb2.HloModuleProto | None = None,
    *,
    top_unfused: int = 5,
) -> HloStats:
    """Kernels, fusion, casts and FLOPs of one compiled step.

    Args:
        optimized: The `optimized_hlo_serialized` module.
        unoptimized: The `hlo_serialized` module of the same function, for
            `HloStats.unoptimized_ops`. Defaults to `None`.
        top_unfused: Entries kept in `largest_unfused`. Defaults to `5`.
    """
    if top_unfused < 0:
        raise ValueError(f"top_unfused must be >= 0, got {top_unfused}.")
    kernels, unknown = _kernels(optimized)
    alone = [k for k in kernels if len(k.ops) == 1]

    def per_step(subset: list[_Kernel], count: Callable[..., int]) -> int:
        return sum(count(k) * k.times for k in subset)

    def is_fusion(k: _Kernel) -> bool:
        return k.instruction.opcode == "fusion"

    def converts(k: _Kernel) -> int:
        return sum(op.opcode == "convert" for op in k.ops)

    compute_ops = per_step(kernels, lambda k: len(k.ops))
    fused_ops = compute_ops - per_step(alone, lambda k: 1)
    unfused = [k.as_unfused_op() for k in alone]
    unfused.sort(key=lambda op: (op.bytes, op.flops), reverse=True)
    unoptimized_ops = None
    if unoptimized is not None:
        unoptimized_ops = sum(len(k.ops) for k in _kernels(unoptimized)[0])
    return HloStats(
        kernels_per_step=per_step(kernels, lambda k: 1),
        fusions=per_step(kernels, is_fusion),
        single_op_fusions=per_step(alone, is_fusion),
        compute_ops=compute_ops,
        fused_ops=fused_ops,
        fusion_ratio=fused_ops / compute_ops if compute_ops else 0.0,
        unoptimized_ops=unoptimized_ops,
        converts=per_step(kernels, converts),
        unfused_converts=per_step(alone, converts),
        flops=per_step(kernels, lambda k: k.flops),
        largest_unfused=tuple(unfused[:top_unfused]),
        unknown_trip_counts=unknown,
    )
