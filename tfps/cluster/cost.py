"""What each task of a cluster costs per example: CPU seconds per 1,000 examples (from /proc),
bytes and packets sent and received per step (from the task's link, with emulated hosts), and
tensors (messages) per step (from the step's partition graphs).

The figures cover the training's steady window, the one its examples/s are measured over (from
the end of the chief's first logging window to its last step: `steady_window` in its JSON), so
start-up (interpreter, TensorFlow import, graph building) and the final evaluation are left out.
A task's CPU is that of all its runs (restarts included) and of their children: the launcher
samples /proc/<pid>/stat (utime + stime + cutime + cstime) while a run lives and takes its
rusage when it is reaped. CPU per example does not depend on how many cores the tasks share, so
a cluster's total against one process's (`tfps train`, the same window) is its overhead.

    meter = Meter()
    meter.sample("ps0", pid)                  # every few hundred ms, per running task
    meter.exited("ps0", rusage)               # when a run is reaped (os.wait4's rusage)
    meter.sample_links(net.counters())        # with emulated hosts
    cost(meter, window, trainers, traffic)    # the launcher's final JSON's "cost"
"""
import bisect
import os
import time

_TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu_seconds(pid):
    """utime + stime + cutime + cstime of pid in seconds (its own and its reaped children's), or
    None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return sum(int(x) for x in fields[11:15]) / _TICKS   # fields 14-17 of proc(5)


class Series:
    """(time, value) samples of a growing counter; `at(t)` interpolates linearly between them."""

    def __init__(self):
        self.times, self.values = [], []
        self.ended = False   # no more samples will come (a task's last run was reaped): flat after the last

    def add(self, t, value):
        self.ended = False
        if self.times and t <= self.times[-1]:
            self.values[-1] = max(self.values[-1], value)
            return
        self.times.append(t)
        self.values.append(value)

    def at(self, t):
        """The value at t: interpolated between the samples around it; after the last one, the
        last if the series has ended; else None outside them."""
        if self.times and t > self.times[-1] and self.ended:
            return self.values[-1]
        if not self.times or t < self.times[0] or t > self.times[-1]:
            return None
        i = bisect.bisect_left(self.times, t)
        if self.times[i] == t:
            return self.values[i]
        t0, t1, v0, v1 = self.times[i - 1], self.times[i], self.values[i - 1], self.values[i]
        return v0 + (v1 - v0) * (t - t0) / (t1 - t0)

    def between(self, t0, t1):
        a, b = self.at(t0), self.at(t1)
        return None if a is None or b is None else b - a

    @property
    def last(self):
        return self.values[-1] if self.values else None


class Meter:
    """Per task, its CPU seconds over all its runs and (with emulated hosts) its link's counters,
    as time series."""

    def __init__(self, clock=time.time):
        self._clock = clock
        self._done = {}      # name -> CPU seconds of its runs that have ended
        self.cpu = {}        # name -> Series of CPU seconds
        self.links = {}      # name -> {counter: Series}

    def sample(self, name, pid):
        """Samples the CPU of name's running process pid (nothing when it has just gone)."""
        self.record(name, proc_cpu_seconds(pid))

    def record(self, name, run_seconds):
        """name's running process has used run_seconds of CPU so far (None: nothing known)."""
        if run_seconds is not None:
            self.cpu.setdefault(name, Series()).add(self._clock(), self._done.get(name, 0.0) + run_seconds)

    def exited(self, name, rusage):
        """A run of name ended: its whole CPU (os.wait4's rusage: it and its reaped children)."""
        self._done[name] = self._done.get(name, 0.0) + rusage.ru_utime + rusage.ru_stime
        series = self.cpu.setdefault(name, Series())
        series.add(self._clock(), self._done[name])
        series.ended = True   # until a restart's first sample

    def sample_links(self, counters):
        """counters: {name: {bytes_sent, bytes_received, packets_sent, packets_received}}."""
        now = self._clock()
        for name, values in counters.items():
            series = self.links.setdefault(name, {})
            for key, value in values.items():
                series.setdefault(key, Series()).add(now, value)

    def cpu_seconds(self, name):
        """name's CPU seconds so far (all runs)."""
        series = self.cpu.get(name)
        return series.last if series else None


def _per(value, count, scale=1.0):
    return None if value is None or not count else round(value * scale / count, 3)


def messages_per_step(trainers, names):
    """Per task, the tensors it sends or receives per global step, from each trainer's traced
    partition graphs (its traffic_per_step's messages_by_task), each trainer weighted by its
    share of the steps (its local_steps). trainers: {name: its final JSON}. None for a task no
    trainer's graph names when a trainer has no graph count."""
    counted = {t: m for t, m in trainers.items() if (m.get("traffic_per_step") or {}).get("messages_by_task")}
    steps = {t: m.get("local_steps") or 0 for t, m in counted.items()}
    total = sum(steps.values())
    if not counted or not total or len(counted) < len(trainers):
        return {name: None for name in names}
    out = {name: 0.0 for name in names}
    for t, m in counted.items():
        share = steps[t] / total
        for name, c in m["traffic_per_step"]["messages_by_task"].items():
            if name in out:
                out[name] += share * (c["sent"] + c["received"])
    return {name: round(v, 1) for name, v in out.items()}


# Why a field is null, in the JSON's `unavailable` (docs/cluster.md says more): short, since
# four fields share it. On loopback every task talks over lo, which counts them all together,
# and TensorFlow's gRPC keeps no per-task byte counts.
NO_LINK = "no per-task link on loopback (cluster.netns has one)"


def cost(meter, window, names, trainers, emulation=()):
    """The launcher's final "cost": per task (names) CPU seconds per 1,000 examples in the steady
    window, bytes and packets sent and received per global step (None, with the reason, without
    emulated hosts), messages per step; a total; the emulation's own processes (`emulation`: the
    latency relay) apart, out of the total.

    window: the chief's steady_window {start, end, global_steps, examples}."""
    examples, steps = window.get("examples"), window.get("global_steps")
    t0, t1 = window.get("start"), window.get("end")

    def between(series):
        return series.between(t0, t1) if series is not None and t0 is not None and t1 is not None else None
    messages = messages_per_step(trainers, names)
    links = bool(meter.links)
    tasks, unavailable = {}, {}
    for name in names:
        cpu = between(meter.cpu.get(name))
        row = {"cpu_seconds": _round(meter.cpu_seconds(name)), "cpu_seconds_in_window": _round(cpu),
               "cpu_s_per_1k_examples": _per(cpu, examples, 1000.0)}
        link = meter.links.get(name, {})
        for key in ("bytes_sent", "bytes_received", "packets_sent", "packets_received"):
            row[f"{key}_per_step"] = _per(between(link.get(key)), steps)
        row["messages_per_step"] = messages[name]
        tasks[name] = row
    if not links:
        unavailable.update({f"{k}_per_step": NO_LINK for k in ("bytes_sent", "bytes_received", "packets_sent",
                                                                "packets_received")})
    if any(v is None for v in messages.values()):
        unavailable["messages_per_step"] = "a trainer traced no step (traffic_per_step)"
    cpus = [t["cpu_s_per_1k_examples"] for t in tasks.values()]
    if t0 is None or t1 is None:
        unavailable["cpu_s_per_1k_examples"] = "the chief reported no steady_window"
    out = {"window": {"seconds": _round(t1 - t0) if t0 and t1 else None, "global_steps": steps,
                      "examples": examples},
           "tasks": tasks,
           "total": {"cpu_s_per_1k_examples": round(sum(cpus), 3) if cpus and None not in cpus else None}}
    for name in emulation:
        cpu = between(meter.cpu.get(name))
        out.setdefault("emulation", {})[name] = {"cpu_s_per_1k_examples": _per(cpu, examples, 1000.0)}
    if unavailable:
        out["unavailable"] = unavailable
    return out


def _round(x):
    return None if x is None else round(x, 3)
