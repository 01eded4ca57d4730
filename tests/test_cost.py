"""tfps.cluster.cost: a task's CPU over all its runs, interpolated at the window's ends, per 1,000
examples; messages per step weighted by each trainer's steps. Oracle: the same arithmetic on the
samples given (the launcher's real /proc and link samples are checked in test_netns)."""
import os
import resource

import pytest

from tfps.cluster.cost import Meter, cost, proc_cpu_seconds


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _samples(meter, clock, task, times, started=0):
    """The launcher's samples of `task` at `times`, one CPU-s a second since its run `started`."""
    for t in times:
        clock.now = t
        meter.record(task, float(t - started))


def _rusage(cpu):
    return type("R", (), {"ru_utime": cpu * 0.75, "ru_stime": cpu * 0.25})()


def test_cpu_over_runs_and_restarts_interpolated_at_the_window():
    clock = _Clock()
    meter = Meter(clock)
    # ps0 uses 1 CPU-s a second; its first run dies at t=4 (4 CPU-s, reaped at 4.5), the next
    # starts at t=5 and goes on.
    _samples(meter, clock, "ps0", range(0, 5))
    clock.now = 4.5
    meter.exited("ps0", _rusage(4.0))
    _samples(meter, clock, "ps0", range(5, 11), started=5)
    out = cost(meter, {"start": 2.5, "end": 9.5, "global_steps": 70, "examples": 7000}, ["ps0"], {})
    row = out["tasks"]["ps0"]
    # 2.5 -> 4: 1.5 s; 4 -> 5: none (dead); 5 -> 9.5: 4.5 s
    assert row["cpu_seconds_in_window"] == pytest.approx(6.0)
    assert row["cpu_s_per_1k_examples"] == pytest.approx(6.0 * 1000 / 7000, abs=1e-3)
    assert row["cpu_seconds"] == pytest.approx(9.0)
    assert row["bytes_sent_per_step"] is None and "bytes_sent_per_step" in out["unavailable"]
    assert out["total"]["cpu_s_per_1k_examples"] == row["cpu_s_per_1k_examples"]


def test_a_task_that_ended_before_the_window_ends_counts_what_it_used():
    clock = _Clock()
    meter = Meter(clock)
    _samples(meter, clock, "worker0", range(0, 3))
    clock.now = 2.2
    meter.exited("worker0", _rusage(2.1))   # its last run's whole CPU
    out = cost(meter, {"start": 0.5, "end": 5.0, "global_steps": 10, "examples": 1000}, ["worker0"], {})
    assert out["tasks"]["worker0"]["cpu_seconds_in_window"] == pytest.approx(2.1 - 0.5)


def test_links_and_messages_per_step():
    clock = _Clock()
    meter = Meter(clock)
    for t in range(0, 4):
        clock.now = t
        meter.sample_links({"ps0": {"bytes_sent": 100 * t, "bytes_received": 200 * t, "packets_sent": t,
                                    "packets_received": 2 * t},
                            "chief0": {"bytes_sent": 200 * t, "bytes_received": 100 * t, "packets_sent": 2 * t,
                                       "packets_received": t}})
    trainers = {"chief0": {"local_steps": 30, "traffic_per_step": {"messages_by_task": {
                    "chief0": {"sent": 3, "received": 2}, "ps0": {"sent": 2, "received": 3}}}},
                "worker0": {"local_steps": 10, "traffic_per_step": {"messages_by_task": {
                    "worker0": {"sent": 4, "received": 4}, "ps0": {"sent": 4, "received": 4}}}}}
    out = cost(meter, {"start": 1.0, "end": 3.0, "global_steps": 4, "examples": 400}, ["ps0", "chief0", "worker0"],
               trainers)
    ps0, chief = out["tasks"]["ps0"], out["tasks"]["chief0"]
    assert ps0["bytes_sent_per_step"] == 100 * 2 / 4 and ps0["bytes_received_per_step"] == 200 * 2 / 4
    assert chief["packets_sent_per_step"] == 2 * 2 / 4
    # Each trainer's graph weighted by its share of the steps (30 of 40, 10 of 40).
    assert ps0["messages_per_step"] == pytest.approx(0.75 * 5 + 0.25 * 8, abs=0.05)
    assert chief["messages_per_step"] == pytest.approx(0.75 * 5, abs=0.05)
    assert out["tasks"]["worker0"]["messages_per_step"] == pytest.approx(0.25 * 8, abs=0.05)
    assert "unavailable" not in out or "bytes_sent_per_step" not in out["unavailable"]


def test_proc_cpu_of_this_process_against_getrusage():
    before = resource.getrusage(resource.RUSAGE_SELF)
    sampled = proc_cpu_seconds(os.getpid())
    after = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    low = before.ru_utime + before.ru_stime + children.ru_utime + children.ru_stime
    high = after.ru_utime + after.ru_stime + children.ru_utime + children.ru_stime
    # /proc counts in ticks (four fields, each truncated), and the kernel scales each thread's
    # time to them: a process of many threads (TF's) may be a few ticks more off rusage's microseconds.
    slack = 4 * tick + 1e-3 * high
    assert low - slack <= sampled <= high + slack
    assert proc_cpu_seconds(2**22 + 12345) is None   # no such process
