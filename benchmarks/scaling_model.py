"""A calibrated model of scaling to W workers and P PS, for tfps and for stock TensorFlow on the
same model (issue 26, item 4; docs/scaling.md).

Both systems train the demo's DeepFM (26 features, dim 8, MLP 256-128-64, batch 1024) with Adam:
  tfps:  tfps hash tables, merged, sharded over the PS tasks; tfps's Adam; no pipeline;
  stock: model.hashing_trick -- a tf.Variable per feature (hashing_buckets rows, in P partitions placed
         on the PS tasks), tf.nn.embedding_lookup of id mod buckets, tf.compat.v1.train's Adam
         (whose sparse update decays every row's moments each step).
Every run is `tfps launch` (or `tfps train` for one process), measured the same way: the
launcher's per-task cost from /proc over the chief's steady window (CPU per global step of each
trainer and each PS), messages per step, and with --netns each task's link bytes per step.

The calibration (--measure, ~15 minutes on 2 cores; kept in benchmarks/results/scaling/runs.json,
each run as it ends; --measure runs only those not kept yet): one process of each system; loopback
clusters at W = 1, 2, 3 workers and P = 1, 2 PS; emulated hosts (netns) at W = 2, P = 2, unshaped
and at 10, 1 and 0.1 Gbit/s; stock with 4x the buckets.

The model, per system (fit on the loopback runs at W = 1, 2 and P = 1, 2 and the one process; the
unshaped netns run gives only the link bytes; W = 3 and every netns run are held out and their
throughput predicted, 15% is the bar):
  per global step: trainer CPU c_w(P) and PS CPU c_p(P), each linear in P (each PS adds its
  messages); stock's c_p also grows with the table's rows (its Adam touches every row each step);
  link bytes of the busiest PS and of a trainer (the netns run; a PS's spread over P).
  On this machine (every task on the same 2 cores): global steps/s = min(W / a trainer's pace (a
  W = 1 step's wall time, plus its link's bytes / bw when shaped), eta * cores / (c_w + c_p), bw /
  the busiest PS's bytes per step), eta the share of the cores the busiest fit run got.
  Each task a host of its own (C = 2 cores, 10 Gbit/s links, 100 us round trips): a trainer steps
  in t_w = c_w / u + 2 round trips + its bytes / bw (u: the cores one trainer keeps busy, from the
  one process); global steps/s = min(W / t_w, P * C * eta / c_p(P), bw / the busiest PS's bytes).
  The saturation point is the W / P at which the PS term binds: a worker more adds nothing.

Usage: python benchmarks/scaling_model.py [--measure [--again]] [--steps N] [--no-plot]
Prints the calibration, the held-out checks and the predictions; draws docs/scaling_model.png.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import pyplot, report  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "scaling", "runs.json")
PLOT = os.path.join(ROOT, "docs", "scaling_model.png")
BUCKETS = 2 ** 14          # stock: rows per feature (26 x 16,384 = 426k rows, about the rows tfps makes)
SYSTEMS = {
    "tfps": ["train.optimizer=adam", "train.learning_rate=0.001"],
    "stock": ["train.optimizer=adam", "train.learning_rate=0.001", "model.hashing_trick=true",
              f"model.hashing_buckets={BUCKETS}"],
}
COMMON = ["eval.examples=4096", "train.save_checkpoints_steps=1000000", "train.log_every_steps=200"]
CORES = 2                  # cores per host in the predictions (this machine's)
RTT = 100e-6               # seconds per round trip between hosts (a datacenter network)
ROUNDS = 2                 # sequential round trips of a step: pull the rows and variables, push gradients


def calibration_runs():
    """(system, W, P, netns, gbit, extra sets): what --measure runs."""
    runs = [(s, 0, 0, False, None, []) for s in SYSTEMS]                      # one process
    runs += [(s, w, p, False, None, []) for s in SYSTEMS for p in (1, 2) for w in (1, 2, 3)]
    runs += [(s, 2, 2, True, g, []) for s in SYSTEMS for g in (None, 10.0, 1.0, 0.1)]
    runs += [("stock", 1, 1, False, None, [f"model.hashing_buckets={BUCKETS * 4}"])]
    return runs


def _launch(system, workers, ps, netns, gbit, extra, steps):
    model_dir = tempfile.mkdtemp(prefix="tfps_scaling_")
    sets = SYSTEMS[system] + COMMON + extra + [f"train.steps={steps}", f"model_dir={model_dir}"]
    if system == "stock":
        sets.append(f"model.num_shards={max(ps, 1)}")
    if workers == 0:
        args = ["train"]
    else:
        args = ["launch", "--ps", str(ps), "--workers", str(workers)] + (["--netns"] if netns else [])
        if gbit is not None:
            sets.append(f"cluster.emulated_bandwidth_gbit={gbit}")
    cmd = [sys.executable, "-m", "tfps.cli", *args, "--config", "configs/demo.yaml"]
    cmd += [a for s in sets for a in ("--set", s)]
    started = time.time()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    final = json.loads(out.stdout.strip().splitlines()[-1])
    return {"system": system, "workers": workers, "ps": ps, "netns": netns, "gbit": gbit, "extra": extra,
            "steps": steps, "seconds": round(time.time() - started, 1), "final": final}


def _one_process_cpu(run_cmd_steps):
    """The one-process run's CPU per step, from its own clock over its steady window."""
    w = run_cmd_steps["final"]["steady_window"]
    return w["process_cpu_seconds"] / w["global_steps"], (w["end"] - w["start"]) / w["global_steps"]


def measure(steps, again=False):
    """Runs the calibration runs not yet in RUNS (all of them with again), keeping each as it ends."""
    done = [] if again or not os.path.exists(RUNS) else json.load(open(RUNS))["runs"]
    for system, workers, ps, netns, gbit, extra in calibration_runs():
        if _find(done, system, workers, ps, netns, gbit, extra) is not None:
            continue
        n = steps if system == "tfps" else max(steps // 2, 200)   # stock steps are slower
        label = "one process" if workers == 0 else f"{workers} workers, {ps} PS" + (
            f", netns {gbit or 'unshaped'}" + (" Gbit/s" if gbit else "") if netns else "")
        print(f"scaling_model: {system} {label} {' '.join(extra)}", file=sys.stderr, flush=True)
        done.append(_launch(system, workers, ps, netns, gbit, extra, n))
        os.makedirs(os.path.dirname(RUNS), exist_ok=True)
        with open(RUNS, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d"), "runs": done}, f, indent=1)
            f.write("\n")
    return done


# -- what a run measured ---------------------------------------------------------------------------
def observed(run):
    """Per global step: trainer CPU, PS CPU (seconds), examples/s; link bytes of the busiest PS
    and trainer (max of sent and received) when the run had emulated hosts."""
    f = run["final"]
    if run["workers"] == 0:
        cpu, wall = _one_process_cpu(run)
        return {"cpu_w": cpu, "cpu_p": 0.0, "rate": f["batch_size"] / wall, "batch": f["batch_size"]}
    cost = f["cost"]
    steps, seconds = cost["window"]["global_steps"], cost["window"]["seconds"]
    tasks = cost["tasks"]
    trainers = [t for t in tasks if not t.startswith("ps")]
    ps = [t for t in tasks if t.startswith("ps")]
    out = {"cpu_w": sum(tasks[t]["cpu_seconds_in_window"] for t in trainers) / steps,
           "cpu_p": sum(tasks[t]["cpu_seconds_in_window"] for t in ps) / steps,
           "rate": cost["window"]["examples"] / seconds, "batch": f["batch_size"],
           "messages": sum(tasks[t]["messages_per_step"] or 0 for t in trainers)}
    if tasks[ps[0]]["bytes_sent_per_step"] is not None:
        def link(t):
            return max(tasks[t]["bytes_sent_per_step"], tasks[t]["bytes_received_per_step"])
        out["ps_bytes"] = max(link(t) for t in ps)          # the busiest PS's link, per global step
        out["trainer_bytes"] = max(link(t) for t in trainers) * len(trainers)   # a trainer's, per its own step
    return out


def _find(runs, system, workers, ps, netns=False, gbit=None, extra=()):
    for r in runs:
        if (r["system"], r["workers"], r["ps"], r["netns"], r["gbit"], tuple(r["extra"])) == \
                (system, workers, ps, netns, gbit, tuple(extra)):
            return r
    return None


# -- the model ------------------------------------------------------------------------------------
FIT = {(1, 1), (2, 1), (1, 2), (2, 2)}   # (W, P) of the loopback runs the model is fit on; the rest are held out


def machine_share(runs):
    """The share of the 2 cores the busiest fit run's tasks got (a machine property: the rest goes
    to the kernel, the launcher and what else runs)."""
    shares = []
    for r in runs:
        if r["workers"] and not r["netns"] and not r["extra"] and (r["workers"], r["ps"]) in FIT:
            cost = r["final"]["cost"]
            shares.append(sum(t["cpu_seconds_in_window"] for t in cost["tasks"].values()) / cost["window"]["seconds"])
    return max(shares) / CORES


def fit(runs, system):
    """The model's parameters for one system: per global step CPU of the trainers (c_w) and of the
    PS tasks (c_p), the mean of the fit runs at each P, linear in P (the slope: what a PS more
    adds, never below 0); a W = 1 step's wall time on this machine at P = 1, 2; link bytes per
    step (the netns run, unshaped); the cores one trainer keeps busy (the one process); stock's PS
    CPU per table row (its 4x-buckets run)."""
    at = {p: [observed(_find(runs, system, w, p)) for w in (1, 2) if (w, p) in FIT] for p in (1, 2)}

    def mean(key, p):
        return sum(o[key] for o in at[p]) / len(at[p])
    one, two = (observed(_find(runs, system, 1, p)) for p in (1, 2))
    ns = observed(_find(runs, system, 2, 2, True))
    cpu_one, wall_one = _one_process_cpu(_find(runs, system, 0, 0))
    m = {"batch": one["batch"],
         "cw": (mean("cpu_w", 1), max(mean("cpu_w", 2) - mean("cpu_w", 1), 0.0)),   # c_w(P) = cw0 + cw1 * (P - 1)
         "cp": (mean("cpu_p", 1), max(mean("cpu_p", 2) - mean("cpu_p", 1), 0.0)),
         "t1": (one["batch"] / one["rate"], one["batch"] / two["rate"] - one["batch"] / one["rate"]),
         "eta": machine_share(runs),
         "u": min(CORES, cpu_one / wall_one),
         "ps_bytes_2": ns["ps_bytes"], "trainer_bytes": ns["trainer_bytes"],
         "rows": 26 * BUCKETS if system == "stock" else None, "per_row": 0.0}
    msgs = {p: sum(t["messages_per_step"] for n, t in _find(runs, system, 1, p)["final"]["cost"]["tasks"].items()
                   if n.startswith("ps")) for p in (1, 2)}
    m["ps_msgs"] = (msgs[1], msgs[2] - msgs[1])      # messages the PS tasks handle per step: a + b * (P - 1)
    # PS CPU per message: what a PS more adds per step over the messages it adds (gRPC, rendezvous)
    m["cpu_per_msg"] = m["cp"][1] / m["ps_msgs"][1] if m["ps_msgs"][1] > 0 else 0.0
    big = _find(runs, system, 1, 1, extra=(f"model.hashing_buckets={BUCKETS * 4}",))
    if big is not None:
        m["per_row"] = (observed(big)["cpu_p"] - one["cpu_p"]) / (26 * BUCKETS * 3)
    return m


def c_w(m, p):
    return max(m["cw"][0] + m["cw"][1] * (p - 1), 1e-6)


def c_p(m, p, rows=None):
    """PS CPU per global step over all P PS; stock's grows with the table's rows (its Adam)."""
    extra = m["per_row"] * (rows - m["rows"]) if rows is not None and m["rows"] is not None else 0.0
    return max(m["cp"][0] + m["cp"][1] * (p - 1) + extra, 1e-6)


def ps_bytes(m, p):
    """The busiest PS's link bytes per global step with P PS (the netns run had 2: spread over P)."""
    return m["ps_bytes_2"] * 2 / p


def predict_here(m, workers, ps, gbit=None):
    """examples/s with every task on this machine's 2 cores (each task's link at gbit): the
    trainers' own pace (a W = 1 step's wall time) or the CPU, whichever binds first, or a link."""
    pace = m["t1"][0] + m["t1"][1] * (ps - 1)   # a trainer's step, its link's time added when shaped
    rate = m["eta"] * CORES / (c_w(m, ps) + c_p(m, ps))
    if gbit is not None:
        bw = gbit * 1e9 / 8
        pace += m["trainer_bytes"] / bw
        rate = min(rate, bw / ps_bytes(m, ps))
    rate = min(rate, workers / pace)
    return m["batch"] * rate


def step_time(m, ps, gbit=10.0):
    """A trainer's step on a host of its own: its CPU over the cores it keeps busy, the round
    trips, its link's bytes."""
    return c_w(m, ps) / m["u"] + ROUNDS * m.get("rtt", RTT) + m["trainer_bytes"] / (gbit * 1e9 / 8)


def ps_bound(m, ps, gbit=10.0, cores=CORES, rows=None):
    """Global steps/s the P PS tasks sustain (their CPU, or the busiest one's link)."""
    return min(ps * cores * m["eta"] / c_p(m, ps, rows), gbit * 1e9 / 8 / ps_bytes(m, ps))


def predict_hosts(m, workers, ps, gbit=10.0, cores=CORES, rows=None):
    """examples/s with each task on a host of its own (cores each, links of gbit)."""
    return m["batch"] * min(workers / step_time(m, ps, gbit), ps_bound(m, ps, gbit, cores, rows))


def saturation(m, ps, gbit=10.0, cores=CORES, rows=None):
    """Workers per PS at which the PS tasks bind: beyond it a worker adds nothing."""
    return step_time(m, ps, gbit) * ps_bound(m, ps, gbit, cores, rows) / ps


def rdma(m, cpu_per_msg=5e-6, rtt=5e-6):
    """The model with a verbs transport (docs/rdma.md): each message the PS tasks handle costs
    cpu_per_msg instead of the measured gRPC cost, round trips take rtt; bytes are the same. (The
    trainers' side is left as measured: its per-message cost is not separable in these runs.)"""
    saved = max(m["cpu_per_msg"] - cpu_per_msg, 0.0)
    out = dict(m, cp=(m["cp"][0] - m["ps_msgs"][0] * saved, m["cp"][1] - m["ps_msgs"][1] * saved))
    out["rtt"] = rtt
    return out


# -- the report -----------------------------------------------------------------------------------
TABLE_ROWS = (None, 10**7, 10**8)   # None: the measured tables (stock: 26 x 16,384 rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measure", action="store_true", help="run the calibration runs not yet kept (~15 min)")
    parser.add_argument("--again", action="store_true", help="with --measure: run every calibration run again")
    parser.add_argument("--steps", type=int, default=800, help="tfps steps per run (stock: half)")
    parser.add_argument("--no-plot", action="store_true", help=f"do not draw {os.path.relpath(PLOT, ROOT)}")
    args = parser.parse_args()
    if args.measure:
        runs = measure(args.steps, args.again)
    else:
        if not os.path.exists(RUNS):
            raise SystemExit(f"no calibration at {os.path.relpath(RUNS, ROOT)}: run with --measure first")
        with open(RUNS) as f:
            runs = json.load(f)["runs"]
    models = {s: fit(runs, s) for s in SYSTEMS}
    rows = []
    for s, m in models.items():
        rows.append((f"{s}: per global step", f"trainer CPU {c_w(m, 1) * 1e3:.1f} ms ({m['cw'][1] * 1e3:+.1f} a PS), "
                                              f"PS CPU {c_p(m, 1) * 1e3:.1f} ms ({m['cp'][1] * 1e3:+.1f} a PS), "
                                              f"busiest PS link {ps_bytes(m, 2) / 2**20:.2f} MiB at 2 PS, "
                                              f"trainer link {m['trainer_bytes'] / 2**20:.2f} MiB a step"))
        rows.append((f"{s}: CPU share when saturated, cores per trainer", f"eta {m['eta']:.3f}, u {m['u']:.2f}"))
    errors, checks = [], []
    for r in runs:
        if r["workers"] == 0 or r["extra"]:
            continue
        m, o = models[r["system"]], observed(r)
        held_out = r["netns"] or (r["workers"], r["ps"]) not in FIT
        want = predict_here(m, r["workers"], r["ps"], r["gbit"])
        err = want / o["rate"] - 1
        name = f"{r['system']} W={r['workers']} P={r['ps']}" + (
            f" netns {r['gbit']:g} Gbit/s" if r["gbit"] else " netns" if r["netns"] else "")
        checks.append({"run": name, "measured": round(o["rate"]), "predicted": round(want), "error": round(err, 3),
                       "held_out": held_out})
        if held_out:
            errors.append(abs(err))
        rows.append((f"check {name}", f"measured {o['rate']:.0f} ex/s, predicted {want:.0f} ({err:+.1%})"
                                      + ("" if held_out else " (fit)")))
    rows.append(("held-out runs within 15%", f"{sum(e <= 0.15 for e in errors)} of {len(errors)}, "
                                              f"largest error {max(errors):.1%}"))
    rows.append(("stock: PS CPU per step per table row", f"{models['stock']['per_row'] * 1e9:.1f} ns (its Adam "
                                                         f"decays every row's moments each step)"))
    sat_out = {}
    for s, m in models.items():
        for table in TABLE_ROWS:
            if table is not None and s == "tfps":
                continue   # tfps's PS work is per row a batch touches, not per row of the table
            what = "" if table is None else f", {table:.0e} rows"
            sat = {ps: saturation(m, ps, rows=table) for ps in (1, 8, 32)}
            top = {ps: m["batch"] * ps_bound(m, ps, rows=table) for ps in (8, 32)}
            sat_out[f"{s}{what}"] = {"workers_per_ps": {str(p): round(v, 2) for p, v in sat.items()},
                                     "max_examples_per_sec": {str(p): round(v) for p, v in top.items()}}
            rows.append((f"{s}{what}: saturation, workers per PS", ", ".join(f"P={p}: {v:.2f}" for p, v in sat.items())))
            rows.append((f"{s}{what}: most examples/s (PS-bound)", ", ".join(f"P={p}: {v:.0f}" for p, v in top.items())))
    for table in TABLE_ROWS:
        ratio = ps_bound(models["tfps"], 32) / ps_bound(models["stock"], 32, rows=table)
        rows.append(("tfps / stock, most examples/s at P=32" + ("" if table is None else f", {table:.0e} rows"),
                     f"{ratio:.1f}x"))
    for s, m in models.items():
        r = rdma(m)
        rows.append((f"{s}: PS CPU per message (gRPC), messages at the PS per step",
                     f"{m['cpu_per_msg'] * 1e6:.0f} us; {m['ps_msgs'][0]:g} at P=1, {m['ps_msgs'][1]:+g} a PS"))
        rows.append((f"{s}: with verbs (5 us a message, 5 us round trips)", ", ".join(
            f"P={ps}: most {m['batch'] * ps_bound(r, ps):.0f} ex/s ({ps_bound(r, ps) / ps_bound(m, ps):.1f}x), "
            f"saturation {saturation(r, ps):.2f} workers per PS" for ps in (8, 32))))
        rows.append((f"{s}: with verbs at 100 Gbit/s", ", ".join(
            f"P={ps}: most {m['batch'] * ps_bound(r, ps, gbit=100.0):.0f} ex/s" for ps in (8, 32))))
    report(rows)
    curves = {(s, ps): [(w, predict_hosts(m, w, ps)) for w in range(1, 101)] for s, m in models.items()
              for ps in (8, 32)}
    curves.update({("stock, 1e+08 rows", 32): [(w, predict_hosts(models["stock"], w, 32, rows=10**8))
                                               for w in range(1, 101)]})
    if not args.no_plot:
        _plot(curves, checks)
    print(json.dumps({"checks": checks, "saturation": sat_out,
                      "curves": {f"{s} P={ps}": [round(x) for _, x in points] for (s, ps), points in curves.items()}}))


def _plot(curves, checks):
    plt = pyplot(PLOT)
    if plt is None:
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for (s, ps), points in curves.items():
        left.plot([w for w, _ in points], [x / 1e3 for _, x in points], "-" if s == "tfps" else "--",
                  label=f"{s}, {ps} PS", color="C3" if "rows" in s else "C0" if ps == 8 else "C1")
    left.set_xlabel("workers (each task a host of its own: 2 cores, 10 Gbit/s)")
    left.set_ylabel("predicted k examples/s")
    left.set_title("throughput against workers")
    left.legend()
    measured = [c["measured"] / 1e3 for c in checks]
    predicted = [c["predicted"] / 1e3 for c in checks]
    right.scatter(measured, predicted, c=["C2" if c["held_out"] else "C7" for c in checks])
    top = max(measured + predicted) * 1.1
    right.plot([0, top], [0, top], "k-", lw=0.8)
    right.plot([0, top], [0, top * 1.15], "k:", lw=0.6)
    right.plot([0, top], [0, top * 0.85], "k:", lw=0.6)
    right.set_xlabel("measured k examples/s (this machine)")
    right.set_ylabel("predicted")
    right.set_title("calibration runs (green: held out; dotted: 15%)")
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)
    print(f"wrote {os.path.relpath(PLOT, ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
