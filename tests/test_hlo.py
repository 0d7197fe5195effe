import json

import keras
import pytest
import tensorflow as tf
from tensorflow.compiler.xla import xla_data_pb2
from tensorflow.compiler.xla.service import hlo_pb2

from keras_xla.tf_backend.hlo import (
    analyze,
    analyze_function,
    compiler_ir,
    write_hlo_text,
)

# --- hand-built protos: the counting rules, no TensorFlow compile ----------


def instruction(computation, opcode, dims=(4,), operands=(), calls=()):
    inst = computation.instructions.add(
        name=f"{opcode}.{len(computation.instructions)}", opcode=opcode
    )
    inst.id = computation.id * 100 + len(computation.instructions)
    inst.shape.element_type = xla_data_pb2.PrimitiveType.F32
    inst.shape.dimensions.extend(dims)
    inst.operand_ids.extend(operands)
    inst.called_computation_ids.extend(calls)
    return inst


def hand_module(trip_count=None):
    """entry: param, constant, 3-op fusion, 1-op fusion, copy, tuple, and a
    while whose body holds one dot [4,4]x[4,4]."""
    module = hlo_pb2.HloModuleProto(entry_computation_id=1)
    entry, fused, wrapped, body, cond = (
        module.computations.add(id=i) for i in range(1, 6)
    )
    p = instruction(fused, "parameter")
    e = instruction(fused, "exponential", operands=[p.id])
    c = instruction(fused, "convert", operands=[e.id])
    instruction(fused, "constant", dims=())
    instruction(fused, "add", operands=[c.id, c.id])
    p = instruction(wrapped, "parameter")
    instruction(wrapped, "convert", operands=[p.id])
    arg = instruction(entry, "parameter", dims=(4, 4))
    instruction(entry, "constant", dims=())
    f = instruction(entry, "fusion", operands=[arg.id], calls=[fused.id])
    w = instruction(entry, "fusion", operands=[f.id], calls=[wrapped.id])
    instruction(entry, "copy", dims=(64,), operands=[w.id])
    loop = instruction(
        entry, "while", operands=[arg.id], calls=[body.id, cond.id]
    )
    if trip_count is not None:
        loop.backend_config = json.dumps(
            {"known_trip_count": {"n": str(trip_count)}}
        ).encode()
    instruction(entry, "tuple", operands=[loop.id])
    p = instruction(body, "parameter", dims=(4, 4))
    dot = instruction(body, "dot", dims=(4, 4), operands=[p.id, p.id])
    dot.dot_dimension_numbers.lhs_contracting_dimensions.append(1)
    dot.dot_dimension_numbers.rhs_contracting_dimensions.append(0)
    p = instruction(cond, "parameter", dims=(4, 4))
    instruction(cond, "compare", dims=(), operands=[p.id, p.id])
    return module


def test_hand_built_module_counts_kernels_fusion_and_converts():
    stats = analyze(hand_module())
    # fusion, single-op fusion, copy, dot (body), compare (condition).
    assert stats.kernels_per_step == 5
    assert stats.fusions == 2
    assert stats.single_op_fusions == 1
    # exp, convert, add fused; convert, copy, dot, compare alone.
    assert (stats.compute_ops, stats.fused_ops) == (7, 3)
    assert stats.fusion_ratio == pytest.approx(3 / 7)
    assert (stats.converts, stats.unfused_converts) == (2, 1)
    assert stats.flops == 2 * 4 * 4 * 4
    assert stats.unknown_trip_counts == 1
    assert stats.unoptimized_ops is None
    largest = stats.largest_unfused[0]
    assert (largest.opcode, largest.shape, largest.bytes) == (
        "copy",
        "f32[64]",
        256,
    )
    assert [op.opcode for op in stats.largest_unfused[1:3]] == [
        "dot",
        "convert",
    ]


def test_known_trip_count_multiplies_loop_bodies():
    stats = analyze(hand_module(trip_count=5))
    assert stats.flops == 5 * 2 * 4 * 4 * 4
    # 3 entry kernels, 5 dots, 6 condition checks.
    assert stats.kernels_per_step == 3 + 5 + 6
    assert stats.unknown_trip_counts == 0
    assert len(analyze(hand_module(), top_unfused=2).largest_unfused) == 2
    with pytest.raises(ValueError, match="top_unfused"):
        analyze(hand_module(), top_unfused=-1)


def test_operand_ids_of_a_cloned_computation_are_found():
    # What XLA wrote for a transformer on padded text: a fused dot in
    # computation 60 names its operands by ids whose upper part is
    # another computation's (54 << 32 | local), which once raised
    # KeyError((60, 231928233999)).
    module = hlo_pb2.HloModuleProto(entry_computation_id=1)
    entry = module.computations.add(id=1)
    fused = module.computations.add(id=60)
    p = instruction(fused, "parameter", dims=(4, 4))
    p.id = 60 << 32 | 15
    dot = instruction(fused, "dot", dims=(4, 4))
    dot.id = 60 << 32 | 16
    dot.operand_ids.extend([54 << 32 | 15, 54 << 32 | 15])
    dot.dot_dimension_numbers.lhs_contracting_dimensions.append(1)
    dot.dot_dimension_numbers.rhs_contracting_dimensions.append(0)
    instruction(fused, "exponential", dims=(4, 4), operands=[dot.id])
    arg = instruction(entry, "parameter", dims=(4, 4))
    instruction(entry, "fusion", operands=[arg.id], calls=[fused.id])
    assert 54 << 32 | 15 == 231928233999
    stats = analyze(module)
    assert stats.flops == 2 * 4 * 4 * 4
    assert (stats.kernels_per_step, stats.compute_ops) == (1, 2)
    # Operands of ops that count no FLOPs are never looked up.
    e = instruction(fused, "negate", dims=(4, 4), operands=[99 << 32 | 7])
    assert analyze(module).compute_ops == 3 and e.operand_ids


def ones(*shape):
    return tf.ones(shape)


def test_matmul_flops_exact():
    stats = analyze_function(tf.matmul, ones(8, 16), ones(16, 32))
    assert stats.flops == 2 * 8 * 32 * 16
    assert stats.largest_unfused[0].opcode == "dot"
    assert stats.largest_unfused[0].flops == 2 * 8 * 32 * 16


def test_conv2d_flops_exact():
    def conv(x, k):
        return tf.nn.conv2d(x, k, strides=1, padding="VALID")

    # [2,10,10,3] * [3,3,3,4] -> [2,8,8,4]; each output sums 3*3*3 taps.
    stats = analyze_function(conv, ones(2, 10, 10, 3), ones(3, 3, 3, 4))
    assert stats.flops == 2 * (2 * 8 * 8 * 4) * (3 * 3) * 3
    # 4 input features in 2 groups (feature_group_count=2): 2 per output.
    grouped = analyze_function(conv, ones(1, 6, 6, 4), ones(3, 3, 2, 6))
    assert grouped.flops == 2 * (1 * 4 * 4 * 6) * (3 * 3) * 2


def test_padded_conv_counts_only_taps_on_real_input():
    def conv(x, k):
        return tf.nn.conv2d(x, k, strides=1, padding="SAME")

    # 5 outputs per row with a 3-tap window and padding 1: 2+3+3+3+2 = 13
    # valid taps per row, 13 * 13 per image, not 5 * 5 * 9.
    stats = analyze_function(conv, ones(1, 5, 5, 2), ones(3, 3, 2, 3))
    assert stats.flops == 2 * 3 * 2 * 13 * 13


def strided_conv(x, k):
    return tf.nn.conv2d(x, k, strides=2, padding="SAME")


def dilated_conv(x, k):
    return tf.nn.conv2d(x, k, strides=1, padding="SAME", dilations=2)


def transposed_conv(x, k):  # base (lhs) dilation in the HLO convolution
    return tf.nn.conv2d_transpose(x, k, [1, 17, 17, 2], strides=2)


@pytest.mark.parametrize("conv", [strided_conv, dilated_conv, transposed_conv])
def test_conv_flops_match_taps_counted_by_xla(conv):
    # Convolving ones with ones makes each output the number of real
    # multiply-adds behind it, so the sum is the exact MAC count.
    x, k = ones(1, 9, 9, 2), ones(3, 3, 2, 2)
    macs = float(tf.reduce_sum(tf.function(conv, jit_compile=True)(x, k)))
    assert analyze_function(conv, x, k).flops == 2 * macs


def test_dense_train_step_flops_exact():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dense(4),
        ]
    )
    model.compile("sgd", "mse")
    model.optimizer.build(model.trainable_variables)
    batch, d_in, hidden, d_out = 16, 6, 8, 4
    stats = analyze_function(
        lambda x, y: model.train_step((x, y)),
        ones(batch, d_in),
        ones(batch, d_out),
    )
    # Five dots; biases, relu, mse and SGD add no dot or convolution:
    # forward   h = x @ W1 [16,6]x[6,8],  y = h @ W2 [16,8]x[8,4];
    # backward  dW2 = h^T @ dy [8,16]x[16,4], dh = dy @ W2^T [16,4]x[4,8],
    #           dW1 = x^T @ dh [6,16]x[16,8]; no dx (x is no variable).
    expected = 2 * (
        batch * d_in * hidden  # x @ W1
        + batch * hidden * d_out  # h @ W2
        + hidden * batch * d_out  # dW2
        + batch * d_out * hidden  # dh
        + d_in * batch * hidden  # dW1
    )
    assert expected == 6144
    assert stats.flops == expected
    assert 0 < stats.kernels_per_step < stats.unoptimized_ops
    assert stats.fusions <= stats.kernels_per_step
    assert 0.0 < stats.fusion_ratio < 1.0


def test_fusion_ratio_is_higher_for_a_fusible_chain():
    def fusible(x):
        return tf.cos(tf.sin(tf.exp(x)) * 2.0) + 1.0

    def broken(x):  # a sort splits the chain: XLA cannot fuse through it
        return tf.cos(tf.sort(tf.sin(tf.exp(x)) * 2.0)) + 1.0

    chain = analyze_function(fusible, ones(32, 32))
    split = analyze_function(broken, ones(32, 32))
    assert chain.kernels_per_step == 1
    assert chain.fusion_ratio == 1.0
    assert 0.0 < split.fusion_ratio < chain.fusion_ratio
    assert split.kernels_per_step == 3
    assert "sort" in [op.opcode for op in split.largest_unfused]


def test_converts_counted_in_a_bfloat16_round_trip():
    def round_trip(x):
        return tf.cast(tf.cast(x, tf.bfloat16), tf.float32)

    stats = analyze_function(round_trip, ones(4, 4))
    assert stats.converts == 2
    assert stats.unfused_converts == 0  # both casts share one kernel


def test_while_loop_flops_use_known_trip_count():
    def loop(x):
        def body(i, x):
            return i + 1, tf.matmul(x, x)

        return tf.while_loop(lambda i, x: i < 5, body, (0, x))[1]

    stats = analyze_function(loop, ones(4, 4))
    assert stats.flops == 5 * 2 * 4 * 4 * 4
    assert stats.unknown_trip_counts == 0


def test_compiler_ir_stages_and_text(tmp_path):
    not_jit = tf.function(lambda x: tf.exp(x) * 2.0)  # rewrapped for XLA
    module = compiler_ir(not_jit, ones(3))
    assert isinstance(module, hlo_pb2.HloModuleProto)
    unoptimized = compiler_ir(not_jit, ones(3), stage="hlo_serialized")

    def opcodes(m):
        return {i.opcode for c in m.computations for i in c.instructions}

    assert "fusion" in opcodes(module) and "fusion" not in opcodes(unoptimized)
    text = compiler_ir(not_jit, ones(3), stage="optimized_hlo")
    assert text.startswith("HloModule")
    path = write_hlo_text(str(tmp_path / "dump" / "step.hlo.txt"), text)
    with open(path, encoding="utf-8") as f:
        assert f.read() == text
    with pytest.raises(ValueError, match="Possible choices"):
        compiler_ir(not_jit, ones(3), stage="llvm")


def test_a_program_has_one_fingerprint_whatever_tensorflow_named_it():
    from keras_xla.tf_backend.hlo import parse_hlo_module, program_fingerprint

    def module(fn, x):
        serialized = fn.experimental_get_compiler_ir(x)(stage="hlo_serialized")
        return parse_hlo_module(serialized)

    x = tf.ones([4, 3])

    def make(activation):
        @tf.function(jit_compile=True)
        def step(x):
            return tf.reduce_sum(activation(x @ tf.transpose(x)))

        return step

    first, second = module(make(tf.nn.relu), x), module(make(tf.nn.relu), x)
    # TensorFlow names each function (and so its module) by a process-wide
    # counter: two processes lowering the same program name it apart.
    assert first.name != second.name
    assert program_fingerprint(first) == program_fingerprint(second)
    other = module(make(tf.nn.sigmoid), x)
    assert program_fingerprint(other) != program_fingerprint(first)
    # Another shape: another program.
    wider = make(tf.nn.relu).experimental_get_compiler_ir(tf.ones([5, 3]))
    wider = parse_hlo_module(wider(stage="hlo_serialized"))
    assert program_fingerprint(wider) != program_fingerprint(first)
