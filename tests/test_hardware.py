from keras_xla.core import hardware


def test_cpu_flags_reads_proc_cpuinfo_format(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(
        "processor\t: 0\nflags\t\t: fpu sse2 AVX512_BF16 amx_bf16\n"
        "processor\t: 1\nflags\t\t: fpu\n"
    )
    flags = hardware.cpu_flags(str(path))
    assert flags == {"fpu", "sse2", "avx512_bf16", "amx_bf16"}
    assert hardware.cpu_flags(str(tmp_path / "missing")) == frozenset()


def test_tensorflows_device_infos_accept_physical_devices():
    import tensorflow as tf

    from keras_xla.tf_backend import environment

    cpu = tf.config.list_physical_devices("CPU")[0]
    infos = environment.device_infos(
        [cpu, hardware.DeviceInfo("GPU", "/gpu:0", (8, 0))]
    )
    # A CPU's programs can use the machine's memory.
    memory = hardware.host_memory_bytes()
    assert memory > 1 << 28
    assert infos[0] == hardware.DeviceInfo("CPU", cpu.name, None, memory)
    assert infos[1].compute_capability == (8, 0)
    assert hardware.memory_limit(infos) == memory
    assert hardware.memory_limit([infos[1]]) is None
