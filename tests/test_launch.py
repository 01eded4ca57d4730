"""`tfps launch`: real PS/worker processes on loopback (small config, bounded time)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tfps.cluster.launch import cluster_spec
from tfps.embedding import layout
from tfps.embedding.checkpoint_tools import checkpoint_tables
from test_resume import _tree

pytestmark = pytest.mark.slow


SMALL = ["train.batch_size=256", "train.log_every_steps=100", "eval.examples=2000", "model.hidden_units=[16]",
         "data.vocab_max=5000"]


@pytest.mark.compat   # cluster, resume on 3 PS, export, score: also on the other TensorFlow line in CI
def test_two_async_workers_match_one_process_and_checkpoint_every_shard(tmp_path, cli, forker):
    """train_and_evaluate on 2 PS + chief + worker + evaluator against `tfps train` in one process,
    same data stream and step budget. Adam: its beta powers are one pair whatever the PS count
    (the resumes below check it)."""
    sets = SMALL + ["train.steps=800", "train.save_checkpoints_steps=400", "eval.examples=20000",
                    "train.optimizer=adam", "train.learning_rate=0.01", "train.adam.beta1=0.99"]
    args = [a for s in sets for a in ("--set", s)]
    code, single, err = cli("train", "--config", "configs/demo.yaml", *args, "--set", f"model_dir={tmp_path / 'single'}")
    assert code == 0, err[-3000:]
    single = json.loads(single.strip().splitlines()[-1])
    out = forker.run(["launch", "--config", "configs/demo.yaml", "--ps", "2", "--workers", "2", "--evaluator", *args,
                      "--set", f"model_dir={tmp_path / 'cluster'}"], tmp_path / "launch", timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    metrics = json.loads(out.stdout.strip().splitlines()[-1])
    assert metrics["task"] == "chief:0" and metrics["cluster"] == {"chief": 1, "ps": 2, "worker": 1}
    assert abs(metrics["auc"] - single["auc"]) <= 0.01, (metrics["auc"], single["auc"])
    assert metrics["oracle_auc"] == single["oracle_auc"]   # the same eval sample
    # Both trainers took part, and the evaluator scored the last checkpoint.
    tasks = metrics["tasks"]
    assert tasks["chief0"]["local_steps"] > 0 and tasks["worker0"]["local_steps"] >= 800 * 0.15, tasks   # a share
    # train.cpu_allocator's default (bfc) in every trainer, as TensorFlow reports it
    assert {t: m.get("cpu_allocator") for t, m in tasks.items()} == dict.fromkeys(tasks, "bfc"), tasks
    assert tasks["evaluator0"]["global_step"] >= 800 and abs(tasks["evaluator0"]["auc"] - metrics["auc"]) < 0.01
    assert metrics["traffic_per_step"]["recv_tensor_rpcs"] > 0 and metrics["traffic_per_step"]["tasks"] == 3
    # The checkpoint holds the merged table under one name, whatever the PS count, with every shard's rows.
    ckpt = tf.train.latest_checkpoint(str(tmp_path / "cluster"))
    # train.steps ends at that step: the workers stop early and the chief trains the last steps
    assert int(ckpt.rsplit("-", 1)[1]) == tf.train.load_variable(ckpt, "global_step") == 800
    assert tasks["chief0"]["local_steps"] + tasks["worker0"]["local_steps"] == 800
    tables = checkpoint_tables(ckpt)   # one table, saved as one part per PS
    assert len(tables) == 1 and list(tables.values())[0]["keys"][0] > 0
    table = list(tables)[0]
    saved = layout.read_table(tf.train.load_checkpoint(ckpt), table, ("keys", "freq"))
    assert tf.train.load_variable(ckpt, f"{table}-parts") == 2
    assert len(np.unique(np.mod(saved["keys"], 2))) == 2    # rows of both PS shards
    for task in ("ps0", "ps1", "chief0", "worker0", "evaluator0"):
        assert (tmp_path / "cluster" / "logs" / f"{task}.log").exists()
    # The evaluator's CPU is its own figure (it evaluated), not a share of the training examples'.
    assert "evaluator0" not in metrics["cost"]["tasks"] and metrics["cost"]["evaluation"]["evaluator0"]["cpu_seconds"] > 0
    _export_serve_and_resume(tmp_path, cli, forker, args, metrics["auc"], table, saved, ckpt)


def _export_serve_and_resume(tmp_path, cli, forker, args, cluster_auc, table, saved, ckpt):
    """Trained on 2 PS: `tfps export` with the same config (one shard) serves the chief's model
    (loaded in a graph of its own), so does its stock export (loaded without tfps), and training resumes on 3 PS (`tfps launch`) and in one
    process (`tfps train`) from the 2-PS checkpoint, with the same variable names and fingerprint.
    Adam's beta powers (beta1 0.99: 0.9 ** 900 is below float32) are saved as one pair whatever the PS count (the other PS tasks hold local
    copies), and each resume continues the saved pair. Oracle: with one trainer, the pair is
    the saved pair times (beta1, beta2) ** (steps since)."""
    from tfps.state import manifest
    from tfps.config import load_config
    from tfps.data import SyntheticCriteo
    from tfps.data.synthetic import auc
    from tfps.data.sources import eval_set
    from test_serving import score_saved_model
    from stock_compare import assert_same_scores
    model_dir = tmp_path / "cluster"
    code, out, err = cli("export", "--config", "configs/demo.yaml", *args, "--set", f"model_dir={model_dir}",
                         "--export-dir", str(tmp_path / "export"))
    assert code == 0, err[-3000:]
    saved_model = json.loads(out.strip().splitlines()[-1])["saved_model"]
    sets = [a for a in args if a != "--set"]
    cfg = load_config("configs/demo.yaml", sets)
    features, labels, _ = eval_set(SyntheticCriteo(cfg.data), cfg.eval.examples, cfg.eval.batch_size)
    served = score_saved_model(saved_model, features)
    # The chief scored the same checkpoint on the same sample: the served model gives its AUC.
    assert abs(auc(labels, served) - cluster_auc) < 1e-4, (auc(labels, served), cluster_auc)
    # The stock export of the 2-PS model, loaded without tfps, scores as the tfps export, ids
    # never seen included (tests/stock_compare.py).
    code, out, err = cli("export", "--config", "configs/demo.yaml", *args, "--set", f"model_dir={model_dir}",
                         "--format", "stock", "--export-dir", str(tmp_path / "stock"))
    assert code == 0, err[-3000:]
    rows = {k: v[:64].copy() for k, v in features.items()}
    rows["ids"][:8] = np.arange(8 * 26).reshape(8, 26) + 2**45
    assert_same_scores(saved_model, json.loads(out.strip().splitlines()[-1])["saved_model"], rows, tmp_path)
    step = int(ckpt.rsplit("-", 1)[1])
    shutil.copytree(model_dir, tmp_path / "one", ignore=shutil.ignore_patterns("logs"))
    # The resumed run also evicts (on the chief) and writes delta checkpoints: switches that work
    # on the cluster, and that do not change the table's name.
    policy = ["model.eviction.after_steps=40", "train.evict_every_steps=20", "train.delta_every_secs=0.5"]
    out = forker.run(["launch", "--config", "configs/demo.yaml", "--ps", "3", "--workers", "1", *args,
                      "--set", f"train.steps={step + 100}", *[a for p in policy for a in ("--set", p)],
                      "--set", f"model_dir={model_dir}"], tmp_path / "resume", timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    resumed = tf.train.latest_checkpoint(str(model_dir))
    final_step = int(resumed.rsplit("-", 1)[1])
    assert final_step == tf.train.load_variable(resumed, "global_step") == step + 100
    from tfps.runner.incremental import delta_files
    deltas = delta_files(str(model_dir), after_step=step)
    assert deltas and tf.train.load_checkpoint(deltas[0][1]).has_tensor(f"{table}-delta-parts")
    last_step = layout.read_table(tf.train.load_checkpoint(resumed), table, ("last_step",))["last_step"]
    # Eviction ran at a step >= final_step - 20 and dropped rows idle for more than 40 steps.
    assert last_step.min() >= final_step - 40 - 20 - 2, (last_step.min(), final_step)
    # (The 3-PS chief re-saves the step it restored, so the 2-PS rows were read before.)
    # Every row of the 2-PS checkpoint came back on 3 PS and kept its update count, or was evicted
    # (idle): what the 3-PS chief re-saved at the step it restored holds them all.
    restored = tf.train.load_checkpoint(str(model_dir / f"model.ckpt-{step}"))
    rows = layout.read_table(restored, table, ("keys", "freq"))
    keys, freq = rows["keys"], rows["freq"]
    position = {k: i for i, k in enumerate(keys.tolist())}
    missing = [k for k in saved["keys"].tolist() if k not in position]
    assert not missing, (len(missing), len(saved["keys"]), resumed)
    fewer = [k for k, f in zip(saved["keys"].tolist(), saved["freq"].tolist()) if freq[position[k]] < f]
    assert not fewer, (len(fewer), resumed)
    # In one process, from a copy of the 2-PS model_dir.
    code, _, err = cli("train", "--config", "configs/demo.yaml", *args, "--set", f"train.steps={step + 100}",
                       "--set", f"model_dir={tmp_path / 'one'}")
    assert code == 0, err[-3000:]
    one = tf.train.latest_checkpoint(str(tmp_path / "one"))
    assert one.endswith(f"-{step + 100}"), one
    names = [{n for n, _ in tf.train.list_variables(c)} for c in (ckpt, resumed, one)]
    assert names[0] == names[1] == names[2]
    assert {n for n in names[0] if "power" in n} == {"beta1_power", "beta2_power"}
    assert len({manifest.read(c)["fingerprint"] for c in (ckpt, resumed, one)}) == 1
    # (A cluster's checkpoint is named by a step read before the save: the steps are its own.)
    start = [tf.train.load_variable(ckpt, n) for n in ("beta1_power", "beta2_power")]
    for checkpoint in (resumed, one):
        steps = tf.train.load_variable(checkpoint, "global_step") - tf.train.load_variable(ckpt, "global_step")
        powers = [tf.train.load_variable(checkpoint, n) for n in ("beta1_power", "beta2_power")]
        np.testing.assert_allclose(powers, [start[0] * 0.99 ** steps, start[1] * 0.999 ** steps], rtol=1e-5,
                                   err_msg=checkpoint)


def test_cluster_spec_uses_distinct_free_ports():
    spec = cluster_spec(2, 3)
    addresses = spec["chief"] + spec["ps"] + spec["worker"]
    assert len(set(addresses)) == 5 and len(spec["worker"]) == 2 and len(spec["ps"]) == 2
    # Below the kernel's ephemeral range: no outgoing connection can take one before its task binds it.
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        start = int(f.read().split()[0])
    if start - 10000 >= 64 * 5:   # (else free_ports takes the kernel's choice)
        assert all(int(a.rsplit(":", 1)[1]) < start for a in addresses), (addresses, start)


def _launch(tmp_path, sets, *extra, forker=None):
    """`tfps launch` of the demo (2 PS, 2 trainers unless extra says otherwise) into model_dir
    tmp_path, a Popen; a fork of `forker` if given (no TensorFlow import of its own; its output in
    files beside tmp_path), else a new interpreter (what the Ctrl-C, SIGTERM and kill -9 tests check)."""
    sets = SMALL + sets + [f"model_dir={tmp_path}"]
    if forker is not None:
        argv = ["launch", "--config", "configs/demo.yaml", "--ps", "2", "--workers", "2", *extra]
        return forker.start(argv + [a for s in sets for a in ("--set", s)], f"{tmp_path}.launch.out",
                            f"{tmp_path}.launch.err")
    # SIGINT as in a terminal: a suite started in the background by a non-interactive shell
    # (`cmd &`) would pass on SIGINT ignored, and Ctrl-C never reaches the launcher then. GNU env
    # resets it, not a preexec_fn: Python run between fork and exec in this threaded worker hung
    # once (a clean-clone run: the launcher never started).
    return subprocess.Popen(["env", "--default-signal=INT", sys.executable, "-m", "tfps.cli", "launch", "--config",
                             "configs/demo.yaml", "--ps", "2", "--workers", "2", *extra]
                            + [a for s in sets for a in ("--set", s)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(predicate, what, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _checkpoint_steps(model_dir):
    return sorted(int(p.name[len("model.ckpt-"):-len(".index")]) for p in model_dir.glob("model.ckpt-*.index"))


def _latest_step(model_dir):
    """The step of the newest complete checkpoint (the one the state file names), or -1."""
    latest = tf.train.latest_checkpoint(str(model_dir))
    return int(latest.rsplit("-", 1)[1]) if latest else -1


def _kill(model_dir, task):
    pid = int((model_dir / "logs" / f"{task}.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    return pid


def _table_rows(checkpoint):
    """{key: (freq, values, slots)} over every shard of the merged table in a checkpoint."""
    reader = tf.train.load_checkpoint(checkpoint)
    rows = {}
    for p in layout.table_names(reader.get_variable_to_shape_map()):
        t = layout.read_table(reader, p)
        keys, freq, values, slots = t["keys"], t["freq"], t["values"], t["slots"]
        rows.update({int(k): (int(f), v, s) for k, f, v, s in zip(keys, freq, values, slots)})
    return rows


@pytest.mark.compat
def test_killed_ps_and_worker_are_restarted_and_every_restored_key_survives(tmp_path, forker):
    # A large vocabulary, so that many restored rows are rare ids that training does not touch again.
    # Forked tasks (cluster.fork_tasks, the default): their restarts are forks too. The worker is
    # killed once a checkpoint 400 steps past the restored one exists (measured: at step 603,
    # about 800 steps before the end; on a loaded machine the first checkpoint seen may be later).
    job = _launch(tmp_path, ["train.steps=1400", "train.save_checkpoints_steps=200", "train.keep_checkpoint_max=100",
                             "data.vocab_max=100000"], "--max-restarts", "2", forker=forker)
    try:
        # The newest complete checkpoint (the state file is written last, so wait on it, not on
        # the files: the step-0 checkpoint, with empty tables, is the latest until then). The
        # chief restores this one or a later one that training derived from it.
        _wait_for(lambda: _latest_step(tmp_path) >= 200, "a complete checkpoint past step 200")
        saved = tf.train.latest_checkpoint(str(tmp_path))
        saved_step = int(saved.rsplit("-", 1)[1])
        _kill(tmp_path, "ps1")
        # No checkpoint can be written before the chief has restored the tables on the new PS.
        _wait_for(lambda: [s for s in _checkpoint_steps(tmp_path) if s >= saved_step + 400], "training to go on")
        _kill(tmp_path, "worker0")
        out, err = job.communicate(timeout=300)
    finally:
        job.kill()
    assert job.returncode == 0, out[-3000:] + err[-3000:]
    metrics = json.loads(out.strip().splitlines()[-1])
    assert metrics["restarts"] == {"ps1": 1, "worker0": 1}
    assert metrics["sessions"] >= 2                          # the chief re-created its session
    assert metrics["tasks"]["worker0"]["local_steps"] > 0   # the restarted worker trained
    final = tf.train.latest_checkpoint(str(tmp_path))
    assert int(final.rsplit("-", 1)[1]) >= 1400
    before, after = _table_rows(saved), _table_rows(final)
    assert len(before) > 1000 and not set(before) - set(after)   # every saved key is still there
    unchanged = 0
    for key, (freq, values, slots) in before.items():
        freq_after, values_after, slots_after = after[key]
        # freq counts updates: it never goes back, so no saved row was lost or re-initialized
        assert freq_after >= freq, key
        assert np.all(slots_after >= slots - 1e-6), key   # Adagrad accumulators only grow
        if freq_after == freq:                             # never updated since: the saved value
            unchanged += 1
            np.testing.assert_array_equal(values_after, values)
            np.testing.assert_array_equal(slots_after, slots)
    assert unchanged > 100, unchanged


def _delta_steps(model_dir):
    return sorted(int(p.name[len("delta-"):-len(".index")]) for p in model_dir.glob("delta-*.index"))


def test_kills_with_deltas_on_never_train_a_batch_twice(tmp_path, forker):
    """Deltas every second, no full checkpoint but the first and the last: kill -9 of a PS, then of
    the chief, then of a worker, each once the job has written newer deltas. Each restore takes
    the tables, the dense state and the global step from the same delta, so no row has more
    updates than the global step; the most frequent ids (in nearly every batch) have about as
    many (none lost beyond one in-flight step per trainer and restore)."""
    # Enough steps past the third kill's mark (>= 900 + what one trainer trains while the other
    # restarts: measured 1112) for the killed worker's restart at any machine load.
    job = _launch(tmp_path, ["train.steps=1800", "train.delta_every_secs=1", "train.save_checkpoints_steps=100000",
                             "data.vocab_max=2000"], "--max-restarts", "3", forker=forker)
    try:
        mark = 0
        for task in ("ps0", "chief0", "worker0"):
            mark = _wait_for(lambda: [s for s in _delta_steps(tmp_path) if s >= mark + 300], f"deltas before {task}")[0]
            _kill(tmp_path, task)
        out, err = job.communicate(timeout=400)
    finally:
        job.kill()
    assert job.returncode == 0, out[-3000:] + err[-3000:]
    metrics = json.loads(out.strip().splitlines()[-1])
    assert metrics["restarts"] == {"ps0": 1, "chief0": 1, "worker0": 1}
    final = tf.train.latest_checkpoint(str(tmp_path))
    step = int(tf.train.load_variable(final, "global_step"))
    assert step >= 1800
    freq = np.array([f for f, _, _ in _table_rows(final).values()])
    top = np.sort(freq)[-5:]
    assert top.max() <= step, (top, step)          # nothing trained twice
    assert top.min() >= step - 30, (top, step)     # nothing lost beyond the window (measured: none)


# The lifecycle tests below run a chief and 2 PS (--workers 1): what they check needs no second
# trainer, and each task costs the suite's 2 cores a graph, a session and a server.
LIFECYCLE = ("--workers", "1")


def test_restarts_are_bounded(tmp_path, forker):
    job = _launch(tmp_path, ["train.steps=100000"], "--max-restarts", "0", *LIFECYCLE, forker=forker)
    try:
        _wait_for(lambda: _checkpoint_steps(tmp_path), "the chief's first checkpoint")
        killed = _kill(tmp_path, "ps0")
        out, err = job.communicate(timeout=120)
    finally:
        job.kill()
    assert job.returncode == 1, out[-2000:]
    assert int((tmp_path / "logs" / "ps0.pid").read_text()) == killed     # not restarted
    assert int((tmp_path / "logs" / "ps0.restarts").read_text()) == 0     # the launcher's own record


def test_a_config_error_is_not_restarted(tmp_path, cli, forker):
    """Resuming a dim-8 model with dim 16: the chief refuses the checkpoint (exit 2), and the
    launcher stops the job at once with that code instead of spending its restarts."""
    code, _, err = cli("train", "--config", "configs/demo.yaml",   # the first job: in this process
                       *[a for s in SMALL + ["train.steps=100", f"model_dir={tmp_path}"] for a in ("--set", s)])
    assert code == 0, err[-3000:]
    job = _launch(tmp_path, ["train.steps=200", "model.embedding_dim=16"], "--max-restarts", "3", *LIFECYCLE,
                  forker=forker)
    job.communicate(timeout=600)
    assert job.returncode == 2
    # the launcher's record, written at each start of the chief: started once, never restarted
    assert int((tmp_path / "logs" / "chief0.restarts").read_text()) == 0


def test_ctrl_c_or_sigterm_stops_every_task(tmp_path):
    """SIGINT to a launcher of forked tasks (the default), SIGTERM to one of new interpreters
    (cluster.fork_tasks=false): the signal reaches every task, each is reaped, exit 130."""
    for sig, fork in ((signal.SIGINT, "true"), (signal.SIGTERM, "false")):
        model_dir = tmp_path / sig.name
        job = _launch(model_dir, ["train.steps=100000", f"cluster.fork_tasks={fork}"], *LIFECYCLE)
        try:
            _wait_for(lambda: model_dir.exists() and _checkpoint_steps(model_dir), "the chief's first checkpoint")
            pids = [int(p.read_text()) for p in (model_dir / "logs").glob("*.pid")]
            job.send_signal(sig)
            out, _ = job.communicate(timeout=60)
        finally:
            job.kill()
        assert job.returncode == 130, out[-2000:]
        assert len(pids) == 3   # chief and 2 PS
        for pid in pids:   # every task is gone (reaped by the launcher)
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)


@pytest.mark.parametrize("fork", [False, True])
def test_kill_9_of_the_launcher_leaves_no_task_alive(tmp_path, fork):
    job = _launch(tmp_path, ["train.steps=100000", f"cluster.fork_tasks={str(fork).lower()}"], *LIFECYCLE)
    try:
        _wait_for(lambda: _checkpoint_steps(tmp_path), "the chief's first checkpoint")
        pids = [int(p.read_text()) for p in (tmp_path / "logs").glob("*.pid")]
        job.kill()                                   # SIGKILL: the launcher cannot clean up itself
        job.wait(timeout=30)
    finally:
        job.kill()
    assert len(pids) == 3   # chief and 2 PS

    def all_gone():
        for pid in pids:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            if open(f"/proc/{pid}/stat").read().split()[2] != "Z":   # a zombie awaiting init counts as gone
                return False
        return True
    _wait_for(all_gone, "every task to die with the launcher", timeout=30)


def test_a_frozen_ps_fails_the_job_after_the_peer_timeout(tmp_path, forker):
    """ps1 stops answering (SIGSTOP): instead of waiting forever, the chief gives up after
    cluster.peer_timeout_secs with exit code 75, and with no restarts left the job ends with it."""
    job = _launch(tmp_path, ["train.steps=100000", "cluster.peer_timeout_secs=8"], "--max-restarts", "0", *LIFECYCLE,
                  forker=forker)
    try:
        _wait_for(lambda: _checkpoint_steps(tmp_path), "the chief's first checkpoint")
        frozen = int((tmp_path / "logs" / "ps1.pid").read_text())
        os.kill(frozen, signal.SIGSTOP)
        started = time.time()
        job.communicate(timeout=120)
        waited = time.time() - started
    finally:
        job.kill()
        try:
            os.kill(frozen, signal.SIGKILL)
        except (ProcessLookupError, UnboundLocalError):
            pass
    assert job.returncode == 75
    assert 8 <= waited < 60, waited


def test_unreachable_ps_under_an_outside_tf_config_fails_after_the_peer_timeout(tmp_path, forker):
    spec = cluster_spec(1, 1)                       # nobody serves the PS address
    tf_config = {"cluster": spec, "task": {"type": "chief", "index": 0}}
    started, peer_timeout = time.time(), 6
    out = forker.run(["train", "--config", "configs/demo.yaml",
                      *[a for s in SMALL + [f"cluster.peer_timeout_secs={peer_timeout}", f"model_dir={tmp_path}"]
                        for a in ("--set", s)]],
                     f"{tmp_path}.chief", timeout=180, env={"TF_CONFIG": json.dumps(tf_config)})
    assert out.returncode == 75, out.stderr[-2000:]
    assert time.time() - started < 15 * peer_timeout   # the timeout and a start: bounded at 15x the timeout


def test_commands_refused_beside_a_running_job_touch_nothing(tmp_path, forker):
    """A job runs (its tasks stopped with SIGSTOP while the others try, so that its own writes do
    not move the tree): a second `tfps launch` and `tfps train` on its model_dir are refused
    (exit 2) and `tfps export` reads it; none of them changes a byte of model_dir (its logs, pid
    files and lease included). The job then goes on and ends well."""
    from tfps.state.lease import LeaseHeld, check_free
    model_dir = tmp_path / "m"
    job = _launch(model_dir, ["train.steps=600", "train.save_checkpoints_steps=100"], "--workers", "1",
                  forker=forker)

    def held_with_a_checkpoint():
        try:
            check_free(str(model_dir))
            return False
        except LeaseHeld:
            return _latest_step(model_dir) >= 0
    _wait_for(held_with_a_checkpoint, "the chief's lease and first checkpoint")
    pids = [job.pid] + [int(p.read_text()) for p in (model_dir / "logs").glob("*.pid")]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        before = _tree(model_dir)
        sets = [a for s in SMALL + [f"model_dir={model_dir}"] for a in ("--set", s)]
        for argv, want in ((["launch", "--config", "configs/demo.yaml", "--ps", "1", "--workers", "1"], 2),
                           (["train", "--config", "configs/demo.yaml"], 2),
                           (["export", "--config", "configs/demo.yaml", "--export-dir", str(tmp_path / "e")], 0)):
            r = forker.run(argv + sets, tmp_path / argv[0], timeout=300)
            assert r.returncode == want, (argv[0], r.stderr[-2000:])
            assert _tree(model_dir) == before, argv[0]
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    assert job.wait(300) == 0, job.output()[-3000:]
