"""A calibrated model of scaling to W workers and P PS, for tfps and for stock TensorFlow on the
same model (issue 26, item 4; docs/scaling.md).

Both systems train the demo's DeepFM (26 features, dim 8, MLP 256-128-64, batch 1024) with Adam:
  tfps:  tfps hash tables, merged, sharded over the PS tasks; tfps's Adam; no pipeline;
  stock: model.stock_tf -- a tf.Variable per feature (stock_buckets rows, in P partitions placed
         on the PS tasks), tf.nn.embedding_lookup of id mod buckets, tf.compat.v1.train's Adam
         (whose sparse update decays every row's moments each step).
Every run is `tfps launch` (or `tfps train` for one process), measured the same way: the
launcher's per-task cost from /proc over the chief's steady window (CPU per global step of each
trainer and each PS), messages per step, and with --netns each task's link bytes per step.

The calibration (--measure, ~15 minutes on 2 cores; kept in benchmarks/results/scaling/runs.json):
  one process of each system; loopback clusters at W = 1, 2, 3 workers and P = 1, 2 PS; emulated
  hosts (netns) at W = 2, P = 2 unshaped, at 10 Gbit/s and at 1 Gbit/s; stock with 4x the buckets.

The model (fit on the W = 1 runs, the unshaped netns run and the one process; the other runs are
held out and predicted, within 15% is the bar):
  per global step: trainer CPU c_w(P) and PS CPU c_p(P) (linear in P), link bytes of the busiest
  PS and of a trainer (from the netns run, scaled by P);
  on this machine (every task on the same 2 cores): examples/s = b * min(eta * cores / (c_w + c_p),
  the busiest link's rate / its bytes per step) with eta the CPU share the runs reach;
  each task on a host of its own (C cores, a link of `bw`): a trainer steps in
  t_w = c_w / u + rounds * rtt + trainer bytes / bw (u: the cores one trainer keeps busy, from the
  one process); the global step rate is min(W / t_w, P * C * eta / c_p(P), P * bw / PS bytes).
  The saturation point is the W / P at which the PS term takes over: t_w * C * eta / c_p(P).

Usage: python benchmarks/scaling_model.py [--measure] [--steps N]
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
    "stock": ["train.optimizer=adam", "train.learning_rate=0.001", "model.stock_tf=true",
              f"model.stock_buckets={BUCKETS}"],
}
COMMON = ["eval.examples=4096", "train.save_checkpoints_steps=1000000", "train.log_every_steps=200"]
CORES = 2                  # cores per host in the predictions (this machine's)
RTT = 100e-6               # seconds per round trip between hosts (a datacenter network)
ROUNDS = 2                 # sequential round trips of a step: pull the rows and variables, push gradients


def calibration_runs():
    """(system, W, P, netns, gbit, extra sets): what --measure runs."""
    runs = [(s, 0, 0, False, None, []) for s in SYSTEMS]                      # one process
    runs += [(s, w, p, False, None, []) for s in SYSTEMS for p in (1, 2) for w in (1, 2, 3)]
    runs += [(s, 2, 2, True, g, []) for s in SYSTEMS for g in (None, 10.0, 1.0)]
    runs += [("stock", 1, 1, False, None, [f"model.stock_buckets={BUCKETS * 4}"])]
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


def measure(steps):
    runs = []
    for system, workers, ps, netns, gbit, extra in calibration_runs():
        n = steps if system == "tfps" else max(steps // 2, 200)   # stock steps are slower
        label = "one process" if workers == 0 else f"{workers} workers, {ps} PS" + (
            f", netns {gbit or 'unshaped'}" + (" Gbit/s" if gbit else "") if netns else "")
        print(f"scaling_model: {system} {label} {' '.join(extra)}", file=sys.stderr, flush=True)
        runs.append(_launch(system, workers, ps, netns, gbit, extra, n))
    os.makedirs(os.path.dirname(RUNS), exist_ok=True)
    with open(RUNS, "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d"), "runs": runs}, f, indent=1)
        f.write("\n")
    return runs


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
def fit(runs, system):
    """The model's parameters for one system, from its W = 1 loopback runs (P = 1, 2), its one
    process and its unshaped netns run."""
    one, two = (observed(_find(runs, system, 1, p)) for p in (1, 2))
    single = observed(_find(runs, system, 0, 0))
    ns = observed(_find(runs, system, 2, 2, True))
    cpu_one, wall_one = _one_process_cpu(_find(runs, system, 0, 0))
    # CPU share of the 2 cores the W = 1 runs reached (the rest: waits and the launcher)
    eta = sum(o["rate"] / o["batch"] * (o["cpu_w"] + o["cpu_p"]) for o in (one, two)) / 2 / CORES
    return {
        "batch": one["batch"],
        "cw": (one["cpu_w"], two["cpu_w"] - one["cpu_w"]),    # c_w(P) = cw0 + cw1 * (P - 1)
        "cp": (one["cpu_p"], two["cpu_p"] - one["cpu_p"]),
        "eta": eta,
        "u": min(CORES, cpu_one / wall_one),                   # cores one trainer keeps busy
        "ps_bytes_2": ns["ps_bytes"], "trainer_bytes": ns["trainer_bytes"],
        "single_rate": single["rate"],
    }


def c_w(m, p):
    return max(m["cw"][0] + m["cw"][1] * (p - 1), 1e-6)


def c_p(m, p):
    return max(m["cp"][0] + m["cp"][1] * (p - 1), 1e-6)


def ps_bytes(m, p):
    """The busiest PS's link bytes per global step with P PS (the netns run had 2: its bytes
    spread over P)."""
    return m["ps_bytes_2"] * 2 / p


def predict_here(m, workers, ps, gbit=None):
    """examples/s with every task on this machine's 2 cores (and each task's link at gbit)."""
    rate = m["eta"] * CORES / (c_w(m, ps) + c_p(m, ps))
    if gbit is not None:
        bw = gbit * 1e9 / 8
        rate = min(rate, bw / ps_bytes(m, ps), workers * bw / m["trainer_bytes"])
    return m["batch"] * rate


def predict_hosts(m, workers, ps, gbit=10.0, cores=CORES):
    """examples/s with each task on a host of its own (cores each, links of gbit)."""
    bw = gbit * 1e9 / 8
    t_w = c_w(m, ps) / m["u"] + ROUNDS * RTT + m["trainer_bytes"] / bw
    rate = min(workers / t_w, ps * cores * m["eta"] / c_p(m, ps), ps * bw / ps_bytes(m, ps))
    return m["batch"] * rate


def saturation(m, ps, gbit=10.0, cores=CORES):
    """Workers per PS at which the PS tasks (CPU or link) bound the step rate."""
    bw = gbit * 1e9 / 8
    t_w = c_w(m, ps) / m["u"] + ROUNDS * RTT + m["trainer_bytes"] / bw
    return min(t_w * cores * m["eta"] / c_p(m, ps), t_w * bw / ps_bytes(m, ps))


# -- the report -----------------------------------------------------------------------------------
def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measure", action="store_true", help="run the calibration clusters (~15 min)")
    parser.add_argument("--steps", type=int, default=800, help="tfps steps per run (stock: half)")
    args = parser.parse_args()
    if args.measure:
        runs = measure(args.steps)
    else:
        if not os.path.exists(RUNS):
            raise SystemExit(f"no calibration at {os.path.relpath(RUNS, ROOT)}: run with --measure first")
        with open(RUNS) as f:
            runs = json.load(f)["runs"]
    models = {s: fit(runs, s) for s in SYSTEMS}
    rows = []
    for s, m in models.items():
        rows.append((f"{s}: per global step", f"trainer CPU {c_w(m, 1) * 1e3:.1f} ms (+{m['cw'][1] * 1e3:.1f} a PS), "
                                              f"PS CPU {c_p(m, 1) * 1e3:.1f} ms (+{m['cp'][1] * 1e3:.1f} a PS), "
                                              f"busiest PS link {ps_bytes(m, 2) / 2**20:.2f} MiB at 2 PS, "
                                              f"trainer link {m['trainer_bytes'] / 2**20:.2f} MiB"))
        rows.append((f"{s}: CPU share reached, cores per trainer", f"eta {m['eta']:.2f}, u {m['u']:.2f}"))
    errors, checks = [], []
    for r in runs:
        if r["workers"] == 0 or r["extra"]:
            continue
        m, o = models[r["system"]], observed(r)
        held_out = r["workers"] != 1 or r["netns"]
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
    big = _find(runs, "stock", 1, 1, extra=(f"model.stock_buckets={BUCKETS * 4}",))
    if big is not None:
        o_big, o = observed(big), observed(_find(runs, "stock", 1, 1))
        per_row = (o_big["cpu_p"] - o["cpu_p"]) / (26 * BUCKETS * 3)
        rows.append(("stock: PS CPU per step per table row", f"{per_row * 1e9:.1f} ns (Adam decays every row's "
                                                             f"moments each step: from the 4x-buckets run)"))
    curves = {}
    for s, m in models.items():
        for ps in (8, 32):
            curves[(s, ps)] = [(w, predict_hosts(m, w, ps)) for w in range(1, 101)]
        sat = {ps: saturation(m, ps) for ps in (1, 8, 32)}
        rows.append((f"{s}: saturation, workers per PS (10 Gbit/s, {CORES} cores a host)",
                     ", ".join(f"P={p}: {v:.1f}" for p, v in sat.items())))
        rows.append((f"{s}: predicted examples/s at W=100", ", ".join(
            f"P={ps}: {predict_hosts(m, 100, ps):.0f}" for ps in (8, 32))))
    ratio = saturation(models["tfps"], 8) / saturation(models["stock"], 8)
    rows.append(("saturation tfps / stock (P=8)", f"{ratio:.1f}x workers per PS"))
    report(rows)
    _plot(curves, checks, models)
    print(json.dumps({"checks": checks, "saturation_workers_per_ps": {
        s: {str(ps): round(saturation(m, ps), 2) for ps in (1, 8, 32)} for s, m in models.items()},
        "saturation_ratio_p8": round(ratio, 2)}))


def _plot(curves, checks, models):
    plt = pyplot(PLOT)
    if plt is None:
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"tfps": "-", "stock": "--"}
    for (s, ps), points in curves.items():
        left.plot([w for w, _ in points], [x / 1e3 for _, x in points], styles[s],
                  label=f"{s}, {ps} PS", color="C0" if ps == 8 else "C1")
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
