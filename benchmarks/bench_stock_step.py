"""Stock TensorFlow's own cost of a cluster step, and whether running several steps per
`session.run` spreads it: the yardstick for issue 26's CPU bar (bench_cluster_batch.py).

A model made of stock ops only, of the demo's order of size but not its config (26 fields of
dim 16 with uniform ids over 200k rows, partitioned over two resource variables by id parity,
tf.unique / dynamic_partition / gather / dynamic_stitch, a 416-256-128-1 MLP, plain SGD:
scatter_sub on the rows, assign_sub on the weights) trains
  one process:  every op on the one CPU device, a plain Session;
  cluster:      the table halves and the weights on 2 PS tasks (`tf.distribute.Server`, each its
                own process, loopback), the rest on the chief;
each with K = 1 step per `session.run` and K = 16 (a tf.while_loop whose every iteration is a
whole step: lookup, forward, backward and the PS's updates, so RunGraph and CleanupGraph come
once per 16 steps while every tensor still crosses tasks every step). Every task and session
has thread spinning off, as tfps's have. CPU per step of each process, from /proc, over a
steady window; the four runs alternated, `--repeats` rounds. The one-process baseline runs in a
process of its own: a cluster's tasks cannot share one with it.

A counter on ps0, bumped by every step's updates, is read at the end: the steps applied must be
the steps run (K per run), or the run fails.

Prints per K: the cluster's CPU per step over one process's, its steps/s over one process's and
its extra CPU per step (cluster - one process, ms); and that extra at K=16 over K=1 (what the
loop spreads). No tfps op is in either graph.

Usage: python benchmarks/bench_stock_step.py [--quick] [--batch 1024] [--steps 400] [--repeats 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import report  # noqa: E402
from tfps.cluster.cost import proc_cpu_seconds  # noqa: E402
from tfps.cluster.ports import cluster_spec  # noqa: E402

VOCAB, DIM, FIELDS, HIDDEN, LR = 200_000, 16, 26, (256, 128), 0.01
KS = (1, 16)


def config(tf):
    """What tfps gives its tasks and sessions (runner/task.py): no thread spinning."""
    c = tf.compat.v1.ConfigProto()
    c.experimental.disable_thread_spinning = True
    return c


def build(tf, batch, k, cluster):
    """(the loss of K steps (one step's loss when K = 1), the steps-applied counter); devices are
    the cluster's or one CPU's."""
    v1 = tf.compat.v1

    def dev(name):
        return tf.device(name if cluster else "/cpu:0")

    emb = []
    for p in range(2):
        with dev(f"/job:ps/task:{p}"):
            emb.append(v1.get_variable(f"emb{p}", [VOCAB // 2, DIM], use_resource=True,
                                       initializer=v1.random_normal_initializer(0, 0.01)))
    weights, width = [], FIELDS * DIM
    for i, h in enumerate(HIDDEN + (1,)):
        with dev(f"/job:ps/task:{i % 2}"):
            weights.append(v1.get_variable(f"w{i}", [width, h], use_resource=True,
                                           initializer=v1.glorot_uniform_initializer()))
        width = h
    with dev("/job:ps/task:0"):
        applied = v1.get_variable("steps_applied", [], tf.int64, v1.zeros_initializer(), use_resource=True)

    def step(i, _):
        with dev("/job:chief/task:0"):
            ids = v1.random_uniform([batch, FIELDS], 0, VOCAB, dtype=tf.int64)
            label = tf.cast(tf.reduce_sum(ids, 1) % 2, tf.float32)
            uniq, idx = tf.unique(tf.reshape(ids, [-1]))
            shard = tf.cast(uniq % 2, tf.int32)
            local = tf.dynamic_partition(uniq // 2, shard, 2)
            where = tf.dynamic_partition(tf.range(tf.size(uniq)), shard, 2)
        rows = []
        for p in range(2):
            with dev(f"/job:ps/task:{p}"):
                rows.append(tf.gather(emb[p], local[p]))
        with dev("/job:chief/task:0"):
            unique_rows = tf.dynamic_stitch(where, rows)
            h = tf.reshape(tf.gather(unique_rows, idx), [batch, FIELDS * DIM])
            ws = [w.read_value() for w in weights]
            for w in ws[:-1]:
                h = tf.nn.relu(tf.matmul(h, w))
            logit = tf.squeeze(tf.matmul(h, ws[-1]), 1)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=label, logits=logit))
            grads = tf.gradients(loss, [unique_rows] + ws)
            row_grads = tf.dynamic_partition(grads[0], shard, 2)
        with dev("/job:ps/task:0"):
            updates = [applied.assign_add(1).op]
        for p in range(2):
            with dev(f"/job:ps/task:{p}"):
                updates.append(emb[p].scatter_sub(tf.IndexedSlices(LR * row_grads[p], local[p])).op)
        for i_w, (w, g) in enumerate(zip(weights, grads[1:])):
            with dev(f"/job:ps/task:{i_w % 2}"):
                updates.append(w.assign_sub(LR * g).op)
        with dev("/job:chief/task:0"), tf.control_dependencies(updates):
            return i + 1, tf.identity(loss)

    with dev("/job:chief/task:0"):
        if k == 1:
            return step(tf.constant(0), None)[1], applied
        loop = tf.while_loop(lambda i, _: i < k, step, (tf.constant(0), tf.constant(0.0)), parallel_iterations=1)
        return loop[1], applied


def trainer(spec, batch, steps, k, ps_pids):
    """Runs in its own process: trains `steps` steps after a warm-up, prints one JSON line."""
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    if spec:
        server = tf.distribute.Server(tf.train.ClusterSpec(spec), job_name="chief", task_index=0,
                                      config=config(tf))
        (loss, applied), target = build(tf, batch, k, cluster=True), server.target
    else:
        (loss, applied), target = build(tf, batch, k, cluster=False), ""
    runs, warmup = max(1, steps // k), max(3, 64 // k)
    with tf.compat.v1.Session(target, config=config(tf)) as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for _ in range(warmup):
            sess.run(loss)
        pids = [os.getpid(), *ps_pids]
        before, start = [proc_cpu_seconds(p) for p in pids], time.perf_counter()
        for _ in range(runs):
            sess.run(loss)
        wall = time.perf_counter() - start
        after = [proc_cpu_seconds(p) for p in pids]
        done = int(sess.run(applied))
    n = runs * k
    if done != (warmup + runs) * k:
        raise SystemExit(f"{done} steps applied, {(warmup + runs) * k} run")
    print(json.dumps({"steps": n, "steps_applied": done, "steps_per_sec": n / wall,
                      "cpu_ms_per_step": [(b - a) * 1e3 / n for a, b in zip(before, after)]}))


def ps_task(spec, index):
    """Runs in its own process: PS task `index` of `spec` until it is killed."""
    import tensorflow as tf
    tf.distribute.Server(tf.train.ClusterSpec(spec), job_name="ps", task_index=index, config=config(tf)).join()


def measure(batch, steps, k, cluster):
    """{steps_per_sec, cpu_ms_per_step (the sum), tasks: [chief or one process, ps0, ps1]}."""
    me = [sys.executable, os.path.abspath(__file__)]
    spec = cluster_spec(2, 1) if cluster else None
    ps = [subprocess.Popen(me + ["--ps-task", str(i), "--spec", json.dumps(spec)]) for i in range(2)] if cluster else []
    try:
        out = subprocess.run(me + ["--trainer", "--spec", json.dumps(spec), "--batch", str(batch),
                                   "--steps", str(steps), "--k", str(k),
                                   "--ps-pids", ",".join(str(p.pid) for p in ps)],
                             capture_output=True, text=True, timeout=1800)
    finally:
        for p in ps:
            p.kill()
            p.wait()
    if out.returncode != 0:
        raise SystemExit(f"the {'cluster' if cluster else 'one-process'} run at K={k} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {"steps_per_sec": result["steps_per_sec"], "cpu_ms_per_step": sum(result["cpu_ms_per_step"]),
            "steps_applied": result["steps_applied"],
            "tasks": [round(x, 2) for x in result["cpu_ms_per_step"]]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round of 64 steps")
    parser.add_argument("--trainer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ps-task", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--spec", default="null", help=argparse.SUPPRESS)
    parser.add_argument("--k", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--ps-pids", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ps_task is not None:
        return ps_task(json.loads(args.spec), args.ps_task)
    if args.trainer:
        pids = [int(p) for p in args.ps_pids.split(",") if p]
        return trainer(json.loads(args.spec), args.batch, args.steps, args.k, pids)
    repeats, steps = (1, 64) if args.quick else (args.repeats, args.steps)
    runs = {k: [] for k in KS}
    for _ in range(repeats):   # round-robin: each round has one process and the cluster at every K
        for k in KS:
            runs[k].append((measure(args.batch, steps, k, False), measure(args.batch, steps, k, True)))
    rows, out = [], {"batch": args.batch}
    for k, pairs in runs.items():
        cpu = [c["cpu_ms_per_step"] / o["cpu_ms_per_step"] for o, c in pairs]
        speed = [c["steps_per_sec"] / o["steps_per_sec"] for o, c in pairs]
        extra = [c["cpu_ms_per_step"] - o["cpu_ms_per_step"] for o, c in pairs]
        rows.append((f"K={k}: cluster / one process, CPU per step",
                     " ".join(f"{x:.2f}x" for x in cpu) + "  (" + ", ".join(
                         f"{c['cpu_ms_per_step']:.1f} / {o['cpu_ms_per_step']:.1f} ms" for o, c in pairs) + ")"))
        rows.append((f"K={k}: cluster / one process, steps/s", " ".join(f"{x:.2f}x" for x in speed)))
        rows.append((f"K={k}: the cluster's extra CPU per step",
                     f"+{statistics.median(extra):.1f} ms (runs: {', '.join(f'{x:+.1f}' for x in extra)})"))
        out[k] = {"cpu_ratio": [round(x, 3) for x in cpu], "speed_ratio": [round(x, 3) for x in speed],
                  "extra_cpu_ms_per_step": [round(x, 2) for x in extra], "runs": pairs}
    loop = [e16 / e1 for e1, e16 in zip(out[1]["extra_cpu_ms_per_step"], out[16]["extra_cpu_ms_per_step"])]
    rows.append(("the cluster's extra CPU per step, K=16 / K=1", " ".join(f"{x:.2f}x" for x in loop)))
    out["loop_ratio"] = [round(x, 3) for x in loop]
    report(rows)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
