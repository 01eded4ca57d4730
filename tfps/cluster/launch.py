"""`tfps launch`: a real PS/worker cluster on this machine, one process per task.

Each task is `tfps train` with its own TF_CONFIG (gRPC servers on free loopback ports); logs go
to MODEL_DIR/logs/<task>.log (each line stamped with the time), the task's current pid to
<task>.pid. While the job runs, a task's status (its state, and a trainer's progress or the
evaluator's last evaluation) is printed when it changes, checked every few seconds.

Given a `task_main` (what `tfps launch` passes: the CLI's main, with TensorFlow and the training
modules imported beforehand by `preload`), each task is a fork of the launcher that runs
task_main(argv): a start or a restart costs no TensorFlow import (about 3 CPU-seconds each on this
machine's cores; a restart after a fault is that much sooner). The launcher only imports: it
builds no graph and starts no TensorFlow thread, so the fork copies no runtime state. Without
task_main, each task is a new `python -m tfps.cli train` process.

A task that dies (a PS or worker killed, a crash) is started again with the same TF_CONFIG and
address: the PS comes back empty, the chief restores the latest checkpoint into it and the
workers carry on. At most `max_restarts` restarts happen in the whole job; one more failure
stops the job with a message naming the task and its log.

When the chief exits, the other trainers and the evaluator get a grace period to finish on
their own, then every task is stopped; the launcher exits with the chief's code after printing
the chief's last line (its JSON metrics) with a per-task summary added. Ctrl-C or SIGTERM stops
every task. Tasks die with the launcher whatever kills it (even SIGKILL): each asks the kernel
for SIGKILL when its parent dies (prctl PR_SET_PDEATHSIG).

With `netns`, every task is an emulated host (tfps.cluster.netns): a network namespace of its
own with its own address on one bridge, its link optionally shaped with tbf; a forked task
moves itself into its namespace, an exec'd one (tfps.cluster.process) right after the exec, before
the module it runs is imported. The namespaces go with the
launcher, kill -9 included (their keeper process removes them when the launcher's pipe closes).

With memory caps (cluster.memory_cap_mib: {ps: MiB, chief: ..., worker: ..., evaluator: ...}),
every capped task runs in a memory cgroup of its own (tfps.cluster.cgroups; root), which it joins
before it runs anything. A task over its cap is killed by the kernel and restarted like any dead
task, and the launcher's line names the cap; the final JSON counts the kills per task
(`oom_kills`). The groups go when the launcher ends; those of a launcher killed with kill -9 go
at the next launch.

The final JSON's `cost` gives, per task, CPU seconds per 1,000 examples over the chief's steady
window (sampled from /proc every SAMPLE_SECS, each run's rusage when it is reaped), bytes and
packets per step from its link (emulated hosts only) and messages per step (tfps.cluster.cost).
"""
import json
import os
import signal
import subprocess
import tempfile
import time

from tfps.cluster import cgroups
from tfps.cluster import launch_report as report
from tfps.cluster import netns as netns_lib
from tfps.cluster.capacity import check_capacity
from tfps.cluster.cost import Meter, cost
from tfps.cluster.ports import cluster_spec, free_ports  # noqa: F401 -- tfps.cluster.launch's names too
from tfps.cluster.process import Child, exec_argv, fork_task
from tfps.config import load_config
from tfps.state.lease import check_free

GRACE_SECS = 120.0   # after the chief exits, how long the other workers and the evaluator may run on
CONFIG_ERROR_EXIT = 2   # `tfps train`'s exit code for a bad config or a checkpoint that does not fit


class _Task:
    """One process of the job, restartable with the same TF_CONFIG and log file."""

    def __init__(self, task_type, index, argv, spec, log_dir, task_main=None, signals=None, meter=None,
                 network=None, groups=None, cap_mib=None):
        self.type, self.index, self.name = task_type, index, f"{task_type}{index}"
        self.log_path = os.path.join(log_dir, f"{self.name}.log")
        self._argv = argv   # `tfps` without its first word: ['train', ...]
        self._task_main, self._signals = task_main, signals
        self._meter, self._network = meter, network
        self._groups, self.cap_mib = (groups, cap_mib) if cap_mib else (None, None)
        self._oom_kills_before = 0   # the group's count when the current run started
        self._env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": spec,
                                                           "task": {"type": task_type, "index": index}}))
        self._log = open(self.log_path, "w")
        self.restarts = 0
        self.proc = None

    def start(self):
        if self.proc is not None:
            self.restarts += 1
            self._log.write(f"\n==== tfps launch: restart {self.restarts} of {self.name} "
                            f"(the last run: {self.how_it_ended()}) ====\n")
            self._log.flush()
        cgroup = self._groups.procs(self.name) if self._groups else None
        self._oom_kills_before = self.oom_kills
        netns_fd = self._network.fd(self.name) if self._network else None
        if self._task_main is not None:
            self.proc = fork_task(self._task_main, self._argv, self._env, self._log, os.getpid(),
                                  f"tfps-{self.name}", self._signals, netns_fd=netns_fd,
                                  close_fds=self._network.private_fds if self._network else (), timestamps=True,
                                  cgroup=cgroup)
        else:
            netns_path = os.path.join(netns_lib.NETNS_DIR, self._network.netns_of(self.name)) if self._network else None
            popen = subprocess.Popen(exec_argv(os.getpid(), "tfps.cli", self._argv, netns_path, timestamps=True,
                                               cgroup=cgroup), env=self._env,
                                     stdout=self._log, stderr=subprocess.STDOUT)
            self.proc = Child(popen.pid, popen)
        if self._meter is not None:
            self.proc.on_exit = lambda rusage, name=self.name: self._meter.exited(name, rusage)
        with open(self.log_path[:-len(".log")] + ".pid", "w") as f:   # for operators' tools
            f.write(f"{self.proc.pid}\n")
        with open(self.log_path[:-len(".log")] + ".restarts", "w") as f:   # the launcher's record of them
            f.write(f"{self.restarts}\n")

    @property
    def oom_kills(self):
        """Times the kernel killed this task for its memory cap, over all its runs (0 uncapped)."""
        return (self._groups.oom_kills(self.name) or 0) if self._groups else 0

    def how_it_ended(self):
        """`exited N`, or `killed by the kernel for exceeding its memory cap (...)` for a run the
        OOM killer ended (SIGKILL, and one more kill in its cgroup's count since the run began)."""
        rc = self.proc.returncode
        if rc == -signal.SIGKILL and self.oom_kills > self._oom_kills_before:
            return (f"killed by the kernel for exceeding its memory cap "
                    f"(cluster.memory_cap_mib.{self.type}: {self.cap_mib} MiB)")
        return f"exited {rc}"

    @property
    def state(self):
        code = self.proc.poll()
        return "running" if code is None else f"exited {code}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def reap(self, timeout=10):
        if self.proc is not None:
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def _latency_relays(spec, latency_ms, host, log_dir, network=None):
    """(the trainers' cluster spec, the relay process): with latency_ms > 0, every PS address the
    trainers see is a tfps.cluster.latency relay in front of the real one (the PS tasks bind their
    own); else (spec, None). With emulated hosts the relay is a host of its own ("relay")."""
    if not latency_ms:
        return spec, None
    if network is not None:
        host = network.addresses["relay"]
        ports = [netns_lib.PORT + k for k in range(len(spec["ps"]))]
    else:
        ports = free_ports(len(spec["ps"]), host)
    routes = [f"{port}={address}" for port, address in zip(ports, spec["ps"])]
    log = open(os.path.join(log_dir, "latency_relay.log"), "w")
    netns_path = os.path.join(netns_lib.NETNS_DIR, network.netns_of("relay")) if network else None
    relay = subprocess.Popen(exec_argv(os.getpid(), "tfps.cluster.latency", ["--delay-ms", str(latency_ms),
                                       "--host", host, *routes], netns_path), stdout=log, stderr=subprocess.STDOUT)
    return dict(spec, ps=[f"{host}:{port}" for port in ports]), Child(relay.pid, relay)


def _task_names(num_ps, num_workers, evaluator):
    return ([("ps", i) for i in range(num_ps)] + [("chief", 0)] + [("worker", i) for i in range(num_workers - 1)]
            + ([("evaluator", 0)] if evaluator else []))


def _emulated_hosts(names, latency_ms, bandwidth_gbit, log_dir, printer):
    """The network of `--netns`: a namespace per task (and the latency relay's), made after
    those of dead launchers are swept away. Returns (Network, cluster spec)."""
    for name in netns_lib.sweep():
        printer(f"removed network namespace {name}: its launcher is gone", flush=True)
    tasks = [f"{t}{i}" for t, i in names]
    network = netns_lib.Network.start(os.getpid(), tasks + (["relay"] if latency_ms else []), bandwidth_gbit,
                                      shaped=tasks, log=open(os.path.join(log_dir, "netns.log"), "w"))
    spec = {}
    for t, i in names:
        if t != "evaluator":
            spec.setdefault(t, []).append(f"{network.addresses[f'{t}{i}']}:{netns_lib.PORT}")
    with open(os.path.join(log_dir, "netns.json"), "w") as f:   # for operators' tools
        json.dump({"owner": network.owner, "keeper": network.keeper_pid, "hosts": {
            h: {"netns": network.netns_of(h), "address": a} for h, a in network.addresses.items()}}, f)
    return network, spec


def launch(settings, printer=print, task_main=None, preload=None):
    """Runs the job of `settings` (a LaunchConfig, tfps.cluster.launch_config); returns the chief's
    exit code (1 when restarts ran out). latency_ms > 0 puts a relay delaying each direction by
    that much between the trainers and every PS. With task_main (argv -> exit code, `tfps` without
    its first word), every task is a fork of this process running it, after preload() (imports
    only) has run here once. netns: every task is an emulated host (tfps.cluster.netns), its link
    shaped to bandwidth_gbit each way when given. The config's cluster.memory_cap_mib puts each
    capped task in a memory cgroup of its own (tfps.cluster.cgroups): read here from config and
    overrides, as each task reads them."""
    settings.checked()
    if settings.netns:
        netns_lib.check_available(shaping=settings.bandwidth_gbit is not None)
    caps_mib = load_config(settings.config, list(settings.overrides)).cluster.memory_cap_mib.by_job()   # {job: MiB}
    hierarchy = cgroups.check_available() if caps_mib else None
    if settings.model_dir:   # a job already writing it: refused before any log, pid file or directory is opened
        check_free(settings.model_dir)
    if task_main is not None and preload is not None:
        preload()   # before the bound: a task starts as a copy of this process
    check_capacity(settings.num_tasks())
    names = _task_names(settings.num_ps, settings.num_workers, settings.evaluator)
    _sweep_cgroups(hierarchy, printer)
    network = groups = None
    if caps_mib:   # before any directory: a refused cgroup leaves no model_dir/logs (or temporary dir)
        groups = cgroups.TaskGroups.make(os.getpid(), {f"{t}{i}": caps_mib[t] << 20 for t, i in names
                                                       if t in caps_mib}, hierarchy)
    log_dir = None
    try:
        model_dir = settings.model_dir or tempfile.mkdtemp(prefix="tfps_cluster_")
        log_dir = os.path.join(model_dir, "logs")
        os.makedirs(log_dir, exist_ok=True)
        if settings.netns:
            network, spec = _emulated_hosts(names, settings.latency_ms, settings.bandwidth_gbit, log_dir, printer)
        else:
            spec = cluster_spec(settings.num_ps, settings.num_workers, settings.host)
        return _run(settings, spec, names, model_dir, log_dir, printer, task_main, network, groups)
    finally:
        if groups is not None:
            left = groups.close()
            if left:
                printer(f"tfps launch: could not remove the memory cgroups {', '.join(left)}; `rmdir PATH` "
                        f"removes an empty one", flush=True)
        if network is not None:
            left = network.close()
            if left:
                printer(f"tfps launch: could not remove the network namespaces {', '.join(left)}; "
                        f"`ip netns del NAME` removes one (see {log_dir}/netns.log)", flush=True)


def _sweep_cgroups(hierarchy, printer):
    """Removes the memory cgroups of launchers that are gone (a launcher killed with kill -9 leaves
    its empty groups behind): at every launch as root, capped or not."""
    if hierarchy is None:
        if os.geteuid() != 0:
            return
        try:
            hierarchy = cgroups.find()
        except cgroups.CgroupError:
            return
    for name in cgroups.sweep(hierarchy):
        printer(f"removed memory cgroup {os.path.join(hierarchy.mount, name)}: its launcher is gone", flush=True)


def _run(settings, spec, names, model_dir, log_dir, printer, task_main, network, groups=None):
    max_restarts, host, latency_ms = settings.max_restarts, settings.host, settings.latency_ms
    argv = ["train"] + (["--config", settings.config] if settings.config else [])
    for item in list(settings.overrides) + [f"model_dir={model_dir}"]:
        argv += ["--set", item]
    meter = Meter()
    trainer_spec, relay = _latency_relays(spec, latency_ms, host, log_dir, network)
    if relay is not None:
        relay.on_exit = lambda rusage: meter.exited("latency_relay", rusage)
    # A forked task gets the signal dispositions the launcher was started with (SIGINT ignored
    # in a background job stays ignored, as for an exec'd task), not the launcher's own handlers.
    signals = {signal.SIGINT: signal.getsignal(signal.SIGINT), signal.SIGTERM: signal.getsignal(signal.SIGTERM)}
    caps_mib = {name: cap >> 20 for name, cap in groups.caps.items()} if groups else {}
    tasks = [_Task(t, i, argv, spec if t == "ps" else trainer_spec, log_dir, task_main, signals, meter, network,
                   groups, caps_mib.get(f"{t}{i}")) for t, i in names]
    chief = next(t for t in tasks if t.type == "chief")
    num_ps, num_workers = len(spec["ps"]), 1 + len(spec.get("worker", []))
    where = (f"each in a network namespace of its own ({network.netns_of('*')}, addresses "
             f"{min(network.addresses.values())} up; see {log_dir}/netns.json)" if network else f"on {host}")
    printer(f"launching {num_ps} ps + {num_workers} worker(s) (chief included)"
            f"{' + an evaluator' if any(t == 'evaluator' for t, _ in names) else ''} {where}; model_dir {model_dir}; "
            f"logs in {log_dir}; at most {max_restarts} restart(s)"
            f"{f'; trainers reach the PS through relays adding {latency_ms:g} ms each way' if relay else ''}"
            f"{report.caps_words(tasks, groups)}. "
            f"TF's gRPC servers listen on all interfaces (TF offers no "
            f"bind address) and have no authentication: keep these ports behind a firewall", flush=True)
    restarts, failure, code = 0, None, 1   # code: the chief's, or 1 when the job fails
    previous_term = signal.signal(signal.SIGTERM, _interrupt)   # a scheduler's stop: like Ctrl-C
    try:
        for t in tasks:
            try:
                t.start()
            except OSError as e:   # fork or exec refused: out of processes or memory
                started = sum(1 for u in tasks if u.proc is not None)
                failure = (f"tfps launch: could not start {t.name} ({e.strerror or e}: this machine cannot start "
                           f"another process now); stopping the {started} task(s) already started")
                break
        last_status, shown = time.time(), {}
        while failure is None:
            time.sleep(SAMPLE_SECS)
            _sample(meter, tasks, relay, network)
            if chief.proc.poll() == 0:
                break
            for t in tasks:
                rc = t.proc.poll()
                if rc is None or (rc == 0 and t.type != "ps"):
                    continue
                if rc == CONFIG_ERROR_EXIT or restarts >= max_restarts:
                    why = ("a configuration error, which a restart cannot mend" if rc == CONFIG_ERROR_EXIT else
                           f"the job has used its {max_restarts} restart(s) (--max-restarts)")
                    failure = (f"tfps launch: {t.name} {t.how_it_ended()} ({why}); stopping the job. Its last line: "
                               f"{report.last_line(t.log_path)[:300]!r}. See {t.log_path}")
                    code = CONFIG_ERROR_EXIT if rc == CONFIG_ERROR_EXIT else rc if t is chief and rc > 0 else 1
                    break
                restarts += 1
                printer(f"[{t.name}] {t.how_it_ended()}: restarting it ({restarts} of {max_restarts} restarts)",
                        flush=True)
                try:
                    t.start()
                except OSError as e:
                    failure = (f"tfps launch: could not restart {t.name} ({e.strerror or e}: this machine cannot "
                               f"start another process now); stopping the job")
                    break
            if failure:
                break
            if time.time() - last_status >= settings.status_every:
                last_status = time.time()
                report.print_status(tasks, shown, printer)
        if failure is None:
            code = 0
            _wait_for_others(tasks, printer, lambda: _sample(meter, tasks, relay, network))
    except KeyboardInterrupt:
        printer("interrupted: stopping every task", flush=True)
        code = 130
    finally:
        _sample(meter, tasks, relay, network)
        for t in tasks:
            if t.proc is not None:
                t.stop()
        for t in tasks:
            t.reap()
        if relay is not None:
            relay.kill()
            relay.wait()
        signal.signal(signal.SIGTERM, previous_term)
    oom_kills = {t.name: t.oom_kills for t in tasks if t.oom_kills}
    if failure:
        printer(failure, flush=True)
        # The last line is JSON whatever the outcome: what failed, and the restarts and kills before it.
        printer(json.dumps({"failure": failure, "exit_code": code, "restarts": {t.name: t.restarts for t in tasks
                                                                                if t.restarts},
                            "oom_kills": oom_kills}), flush=True)
        return code
    final = report.last_line(chief.log_path, json_only=True)
    if code == 0 and final:
        metrics = json.loads(final)
        metrics["tasks"] = {t.name: report.summary(t) for t in tasks if t.type != "ps"}
        metrics["restarts"] = {t.name: t.restarts for t in tasks if t.restarts}
        metrics["oom_kills"] = oom_kills
        trainers = {t.name: report.json_line(t) for t in tasks if t.type in ("chief", "worker")}
        # The evaluator's CPU goes to evaluations, not to training examples: its own line says how much.
        metrics["cost"] = cost(meter, metrics.get("steady_window") or {},
                               [t.name for t in tasks if t.type != "evaluator"], trainers,
                               emulation=["latency_relay"] if relay is not None else [])
        for t in tasks:
            if t.type == "evaluator":
                metrics["cost"].setdefault("evaluation", {})[t.name] = {
                    "cpu_seconds": round(meter.cpu_seconds(t.name) or 0.0, 3)}
        for name, s in metrics["tasks"].items():
            printer(f"[{name}] " + ", ".join(report.task_words(k, v) for k, v in s.items() if k != "task"), flush=True)
        report.print_cost(metrics["cost"], printer)
        quality = ", ".join(f"{k} {metrics[k]}" for k in ("auc", "gauc", "logloss", "oracle_auc", "bad_rows")
                            if metrics.get(k) is not None)
        printer(f"the job: {metrics.get('examples_per_sec') or 0:.0f} examples/s over all trainers in the chief's "
                f"steady window (examples_per_sec; each task's own rate is above)"
                f"{'; ' + quality if quality else ''}", flush=True)
        final = json.dumps(metrics)
    printer(f"model_dir {model_dir}: the checkpoints (tfps export, tfps inspect), each task's log in logs/; "
            f"TensorBoard: tensorboard --logdir {model_dir}", flush=True)
    printer(final or report.last_line(chief.log_path), flush=True)
    return code


SAMPLE_SECS = 0.25   # the launcher's loop: restarts, and the tasks' CPU and links sampled for the cost


def _sample(meter, tasks, relay, network):
    for t in tasks:
        if t.proc is not None and t.proc.returncode is None:
            meter.sample(t.name, t.proc.pid)
    if relay is not None and relay.returncode is None:
        meter.sample("latency_relay", relay.pid)
    if network is not None:
        meter.sample_links(network.counters())


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _wait_for_others(tasks, printer, sample):
    """After the chief's success: lets the other workers and the evaluator finish (bounded)."""
    others = [t for t in tasks if t.type in ("worker", "evaluator")]
    deadline = time.time() + GRACE_SECS
    while time.time() < deadline and any(t.proc.poll() is None for t in others):
        time.sleep(SAMPLE_SECS)
        sample()
    for t in others:
        if t.proc.poll() is None:
            printer(f"[{t.name}] still running {GRACE_SECS:.0f} s after the chief finished: stopping it", flush=True)
        elif t.proc.returncode != 0:
            printer(f"[{t.name}] exited {t.proc.returncode}; see {t.log_path}", flush=True)
