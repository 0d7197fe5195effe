"""StepTimer: a call's time ends when its results exist."""

import queue
import statistics
import threading
import time

import pytest

from keras_xla.core import step_timer
from keras_xla.core.step_timer import StepTimer


@pytest.fixture
def clock(monkeypatch):
    """`StepTimer`'s own clock reads at each call's start, in the order
    given (its constructor's read gets 0.0)."""
    reads = []

    def set_reads(*values):
        reads[:] = list(values)

    monkeypatch.setattr(
        step_timer.time, "perf_counter", lambda: reads.pop(0) if reads else 0.0
    )
    return set_reads


def test_a_synchronous_call_ends_where_the_next_begins(clock):
    # TensorFlow on a CPU: the batch end runs on the training thread once
    # the call returned, and the loop's period is from one start to the
    # next; what Keras does after a run's last call (ending the data, the
    # epoch's metrics) is not the step's.
    timer = StepTimer(1, 100)
    clock(10.0, 11.0, 12.0, 20.0)
    timer.begin("train", 0, 9.9)  # starts at 10.0
    timer.complete("train", 0, 10.5)
    timer.begin("train", 1, 10.9)  # starts at 11.0
    timer.complete("train", 1, 11.25)
    timer.close()  # the run's end (at 12.0): at its completion
    timer.begin("test", 0, 19.9)  # starts at 20.0
    timer.close(40.0)  # no batch end (it raised): ends here
    train, test = timer.flush("train"), timer.flush("test")
    assert [r.seconds for r in train] == pytest.approx([0.9, 0.25])
    assert [r.first_step for r in train] == [0, 1]
    assert [r.dispatch_seconds for r in train] == [None, None]
    assert [r.seconds for r in test] == pytest.approx([20.0])


def test_a_pipelined_loop_times_completions_not_calls(clock):
    # JAX: each call returns in 1 ms while the device takes 100 ms a step,
    # so the host runs ahead; completions come later, from another thread.
    starts = [0.0, 0.002, 0.004, 0.006]
    timer = StepTimer(1, 100)
    clock(*starts)
    for step, start in enumerate(starts):
        timer.begin("train", step, start)
        timer.returned(start + 0.001)
    timer.close(0.008)
    for step in range(4):
        timer.complete("train", step, 0.1 * (step + 1))
    records = timer.flush("train")
    assert [r.seconds for r in records] == pytest.approx([0.1] * 4)
    assert [r.dispatch_seconds for r in records] == pytest.approx([0.001] * 4)
    assert [r.started_at - timer.clock_offset for r in records] == (
        pytest.approx(starts, abs=1e-6)
    )


def test_the_hosts_time_between_steps_is_the_loops(clock):
    # The device waited for the host (a slow callback between the steps):
    # the loop's period; the next step from its start.
    timer = StepTimer(1, 100)
    clock(0.0, 5.0, 6.0)
    timer.begin("train", 0, 0.0)
    timer.returned(0.01)
    timer.complete("train", 0, 0.2)
    timer.begin("train", 1, 5.0)
    timer.returned(5.01)
    timer.complete("train", 1, 5.3)
    timer.close()  # the run's end: at the last completion
    assert [r.seconds for r in timer.flush("train")] == pytest.approx(
        [5.0, 0.3]
    )


def test_a_late_stamp_is_bounded_by_the_next_completion(clock):
    # A worker thread stamped call 0 after call 1 (it waited for the
    # interpreter lock): the device finished 0 first.
    timer = StepTimer(1, 100)
    clock(0.0, 0.001)
    timer.begin("train", 0, 0.0)
    timer.returned(0.0005)
    timer.begin("train", 1, 0.001)
    timer.returned(0.0015)
    timer.close(0.002)
    timer.complete("train", 1, 0.2)
    timer.complete("train", 0, 0.25)
    seconds = [r.seconds for r in timer.flush("train")]
    assert seconds == pytest.approx([0.2, 0.0])
    assert sum(seconds) == pytest.approx(0.2)  # the span is kept


def test_results_seen_ready_date_a_host_bound_step(clock):
    # A step shorter than its launch: each call's results exist when the
    # next call begins, while Keras's thread stamped them late, in one
    # burst at the end.
    starts = [0.0, 0.1, 0.2, 0.3]
    timer = StepTimer(1, 100)
    clock(*starts)
    for step, start in enumerate(starts):
        timer.begin("train", step, start)
        timer.returned(start + 0.05, ready=lambda: True)
    timer.close(0.4)  # the next run's begin
    for step in range(4):
        timer.complete("train", step, 0.9 + step * 0.001)
    records = timer.flush("train")
    assert [r.seconds for r in records] == pytest.approx([0.1] * 4)
    # Not ready yet when the next call begins: the stamp stands.
    clock(1.0, 1.1)
    timer.begin("train", 0, 1.0)
    timer.returned(1.01, ready=lambda: False)
    timer.begin("train", 1, 1.1)
    timer.close()
    timer.complete("train", 0, 1.5)
    timer.complete("train", 1, 1.6)
    assert [r.seconds for r in timer.flush("train")] == pytest.approx(
        [0.5, 0.1]
    )


def test_steps_per_execution_matches_each_calls_last_step(clock):
    timer = StepTimer(4, 100)
    clock(0.0, 0.01)
    timer.begin("train", 0, 0.0)
    timer.returned(0.001)
    timer.begin("train", 4, 0.01)
    timer.returned(0.011)
    timer.close(0.02)
    timer.complete("train", 3, 0.4)
    timer.complete("train", 6, 0.7)  # a short last call: steps 4-6
    assert [r.seconds for r in timer.flush("train")] == pytest.approx(
        [0.4, 0.3]
    )


def test_a_completion_of_a_flushed_call_is_dropped(clock):
    timer = StepTimer(1, 100, stall_seconds=0.01)
    clock(0.0, 1.0)
    timer.begin("train", 0, 0.0)
    timer.close(0.5)  # raised: no return, no completion
    assert [r.seconds for r in timer.flush("train")] == [0.5]
    timer.complete("train", 0, 0.6)  # late, and not for the next epoch's
    timer.begin("train", 0, 1.0)
    timer.close(1.5)
    assert [r.seconds for r in timer.flush("train")] == [0.5]


def test_a_completion_that_never_comes_is_waited_for_boundedly(clock):
    timer = StepTimer(1, 100, stall_seconds=0.05)
    clock(0.0)
    timer.begin("train", 0, 0.0)
    timer.returned(0.001)
    timer.close(0.3)
    waited = time.monotonic()
    assert [r.seconds for r in timer.flush("train")] == [0.3]
    assert time.monotonic() - waited < 5.0


def test_the_capacity_asks_for_a_flush(clock):
    timer = StepTimer(2, 2)
    clock(0.0, 1.0, 2.0)
    assert timer.begin("train", 0, 0.0) is None
    assert timer.begin("train", 2, 1.0) is None
    assert timer.begin("train", 4, 2.0) == ("train", 4)


def test_a_planted_asynchronous_device():
    """A real worker thread computes each step for 20 ms, in order, after
    the call returned at once; a second thread stamps each completion,
    as Keras's async batch ends do. The steps' times are the device's,
    the dispatch the host's."""
    work_ms, steps = 20.0, 12
    device: queue.Queue = queue.Queue()
    done = {}

    def run_device():
        while (step := device.get()) is not None:
            time.sleep(work_ms / 1000.0)
            done[step].set()

    def stamp(timer, step):
        done[step].wait()
        timer.complete("train", step, time.perf_counter())

    worker = threading.Thread(target=run_device)
    worker.start()
    timer = StepTimer(1, 1000, stall_seconds=5.0)
    stampers = []
    try:
        for step in range(steps):
            timer.begin("train", step, time.perf_counter())
            done[step] = threading.Event()
            device.put(step)  # the dispatch
            timer.returned(time.perf_counter())
            stampers.append(threading.Thread(target=stamp, args=(timer, step)))
            stampers[-1].start()
        timer.close()
        records = timer.flush("train")  # waits for the device
    finally:
        device.put(None)
        worker.join()
        for thread in stampers:
            thread.join()
    steady = [r.seconds * 1000.0 for r in records[1:]]
    assert len(records) == steps
    assert statistics.median(steady) == pytest.approx(work_ms, rel=0.5)
    assert statistics.median(steady) >= work_ms * 0.9
    dispatch = [r.dispatch_seconds * 1000.0 for r in records]
    assert statistics.median(dispatch) < work_ms / 4
    total = records[-1].started_at - records[0].started_at
    assert sum(r.seconds for r in records) > total  # the device's time


def test_results_ready_without_a_batch_end_are_not_waited_for_long():
    # A callback before the tuner's raised on Keras's thread: the batch
    # end never comes, but the results exist; the flush dates them when
    # it first saw them, after a short grace, not after the stall.
    timer = StepTimer(1, 100, stall_seconds=30.0)
    timer.begin("train", 0, time.perf_counter())
    timer.returned(time.perf_counter(), ready=lambda: True)
    timer.close()
    waited = time.perf_counter()
    records = timer.flush("train")
    assert time.perf_counter() - waited < 5.0
    assert len(records) == 1 and not records[0].warmup


def test_calls_never_seen_complete_are_timed_as_called_not_steady(clock):
    # The fit raised in a pipelined loop: two of four calls completed.
    starts = [0.0, 0.01, 0.02, 0.03]
    timer = StepTimer(1, 100)
    clock(*starts)
    for step, start in enumerate(starts):
        timer.begin("train", step, start)
        timer.returned(start + 0.005)
    timer.close(0.04)
    timer.complete("train", 0, 0.1)
    timer.complete("train", 1, 0.2)
    records = timer.flush("train", wait=False)
    assert [r.seconds for r in records] == pytest.approx([0.1, 0.1, 0.01, 0.01])
    assert [r.warmup for r in records] == [False, False, True, True]


def test_the_earlier_of_two_bounds_is_the_completion(clock):
    # Seen ready at the next call's begin (1.0), while Keras's thread
    # had read the logs at 0.4 and stamped after: the stamp wins.
    timer = StepTimer(1, 100)
    clock(0.0, 1.0)
    timer.begin("train", 0, 0.0)
    timer.returned(0.1, ready=lambda: True)
    timer.begin("train", 1, 1.0)
    timer.complete("train", 0, 0.4)
    timer.returned(1.1)
    timer.complete("train", 1, 1.2)
    timer.close()
    assert timer._calls[0].completed == pytest.approx(0.4)
    first = timer.flush("train")[0]
    assert first.seconds == pytest.approx(1.0)  # to the next begin
