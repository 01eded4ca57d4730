"""A model bigger than one PS (tfps launch's memory caps, tfps.cluster.cgroups): it trains on
capped PS tasks, resumes on fewer, is exported by a capped export process and followed by a
capped `tfps serve --follow`, every row and score checked against an uncapped run. Needs root and
a writable memory controller (skipped, with the reason, elsewhere)."""
import json
import os
import signal
import socket
import subprocess
import sys

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_service_pb2_grpc

import tfps.embedding.checkpoint_tools
from tfps.cluster import cgroups
from tfps.config import load_config
from tfps.data import SyntheticCriteo
from tfps.data.sources import eval_set
from tfps.embedding import layout
from serve_client import _request, _rest
from test_launch import _wait_for
from test_memory_caps import GROWING, _read_file, needs_cgroups
from test_serving import score_saved_model


@needs_cgroups
@pytest.mark.slow
def test_a_model_whose_checkpoint_through_one_ps_overflows_its_cap_trains_on_4_capped_ps_resumes_on_3(
        tmp_path, forker):
    """The model's table (about 950,000 rows of dim 32 with Adagrad slots: about 270 MB in
    memory) on PS tasks capped at 448 MiB each: a save or restore that passed the
    whole table through one PS (2.45 times the table on it, as tfps did before parts) could not
    fit. On 4 capped PS tasks, one trainer, it trains and saves (each PS its own part), is killed
    -9, resumes on 3 capped PS tasks (each restoring only the rows of its keys) writing deltas,
    and ends: no task was killed by its cap, and every row's key, update count and value equal
    those of one uncapped process that trained the same steps (one trainer: the same batches in
    the same order). A stock export of the 4-PS checkpoint, made by a capped export process, is
    served by `tfps serve --follow` in a memory group of its own while the 3 PS train: it applies
    their deltas and final checkpoint, and at step 20 scores as the (capped) export of step 20
    does. Its cap, 896 MiB, is the server's fixed cost (about 480 MiB: TensorFlow, gRPC, the
    graph), the served table (about 140 MiB with its index) and one new copy of it; the follower
    that read a checkpoint's whole columns and copied them again peaked at 923 MiB."""
    sets = [s for s in GROWING if not s.startswith("train.steps=")] + [
        "train.save_checkpoints_steps=10", "train.log_every_steps=4"]
    oracle = forker.run(["train", "--config", "configs/demo.yaml", *[a for s in sets + ["train.steps=20"] + [
        f"model_dir={tmp_path / 'one'}"] for a in ("--set", s)]], tmp_path / "one", timeout=300)
    assert oracle.returncode == 0, oracle.stderr[-3000:]
    model_dir = tmp_path / "m"
    caps = ["cluster.memory_cap_mib.ps=448", "train.steps=20"]

    def launch(ps, more, log):
        return forker.start(["launch", "--config", "configs/demo.yaml", "--ps", str(ps), "--workers", "1"]
                            + [a for s in sets + caps + more + [f"model_dir={model_dir}"] for a in ("--set", s)],
                            f"{log}.out", f"{log}.err")

    first = launch(4, [], tmp_path / "first")
    try:
        _wait_for(lambda: (model_dir / "model.ckpt-10.index").exists(), "the 4-PS checkpoint at step 10", timeout=240)
        os.kill(first.pid, signal.SIGKILL)   # the launcher and, with it, every task
        first.wait(60)
    finally:
        first.kill()
    reader = tf.train.load_checkpoint(str(model_dir / "model.ckpt-10"))
    (table,) = layout.table_names(reader.get_variable_to_shape_map())
    assert int(reader.get_tensor(f"{table}-parts")) == 4
    # A stock export of the 4-PS checkpoint, from a capped export process, served by `tfps serve
    # --follow` in a memory cgroup of its own while the 3 PS train on and write deltas.
    cap = 768 << 20
    first_export, _ = _capped_export(sets + [f"model_dir={model_dir}"], tmp_path / "served", cap)
    cfg = load_config("configs/demo.yaml", sets + [f"model_dir={model_dir}"])
    features, _, _ = eval_set(SyntheticCriteo(cfg.data), 64, 64)
    inputs = {"dense": features["dense"], "ids": features["ids"]}
    at_checkpoint = score_saved_model(first_export, inputs)
    serve_groups = cgroups.TaskGroups.make(os.getpid(), {"serve": 896 << 20})
    server = _capped_serve(serve_groups, os.path.dirname(first_export), model_dir, tmp_path)
    try:
        ready = json.loads(server.stdout.readline())
        second = launch(3, ["train.delta_every_secs=0.3"], tmp_path / "second")
        try:
            assert second.wait(300) == 0, second.output()[-3000:] + second.errors()[-3000:]
        finally:
            second.kill()
        def at_step_20():
            assert server.poll() is None, (f"tfps serve exited {server.returncode}, OOM kills "
                                           f"{serve_groups.oom_kills('serve')}: {_read_file(tmp_path, 'serve.err')[-3000:]}")
            return _served_step(ready["rest_api_port"]) == 20
        _wait_for(at_step_20, "the served tables at step 20", timeout=120)
        with grpc.insecure_channel(f"127.0.0.1:{ready['grpc_port']}") as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            served = tf.make_ndarray(stub.Predict(_request(inputs), timeout=60).outputs["probabilities"])
        assert server.poll() is None and serve_groups.oom_kills("serve") in (0, None)
    finally:
        server.kill()
        server.wait(60)
        serve_groups.close()
    final = json.loads(second.output().strip().splitlines()[-1])
    assert final["oom_kills"] == {} and final["restarts"] == {}, final
    want = _rows(str(tmp_path / "one"))
    got = _rows(str(model_dir))
    assert len(want["keys"]) > 9 * 10**5 and 2.45 * want["bytes"] > (448 << 20)   # the old save alone overflows a cap
    np.testing.assert_array_equal(got["keys"], want["keys"])
    np.testing.assert_array_equal(got["freq"], want["freq"])
    np.testing.assert_allclose(got["values"], want["values"], rtol=1e-5, atol=1e-6)
    # The deltas the 3 PS wrote after the 4-PS checkpoint, applied to it in 2 shards: each row is
    # the final one wherever the final checkpoint has not updated it since the last delta.
    from tfps.state import deltas
    chain = [(s, p) for s, p in deltas.delta_files(str(model_dir), after_step=10) if s < 20]
    assert chain, os.listdir(model_dir)
    cut = _rows(str(model_dir / "model.ckpt-10"), chain)
    still = got["last_step"] < chain[-1][0]   # rows stamped before the step the last delta holds
    assert set(cut["keys"].tolist()) >= set(got["keys"][still].tolist())
    at = np.searchsorted(cut["keys"], got["keys"][still])
    np.testing.assert_array_equal(cut["keys"][at], got["keys"][still])
    np.testing.assert_array_equal(cut["freq"][at], got["freq"][still])
    np.testing.assert_array_equal(cut["values"][at], got["values"][still])
    # The stock export of the newest cut, from a process capped below what an export that held
    # the model whole needed (8.7 times the bytes it writes, before it streamed), holds exactly
    # those rows.
    path, exported = _capped_export(sets + [f"model_dir={model_dir}"], tmp_path / "exports", cap)
    keys, values = exported.get_tensor(f"{table}/stock_keys"), exported.get_tensor(f"{table}/stock_values")
    assert 8.7 * (keys.nbytes + values.nbytes) > cap
    order = np.argsort(keys)
    np.testing.assert_array_equal(keys[order], got["keys"])
    np.testing.assert_array_equal(values[1:][order], got["values"])
    np.testing.assert_array_equal(values[0], np.zeros_like(values[0]))
    # What the follower served at step 20 is what the export of step 20 scores, and the deltas and
    # checkpoint it applied changed the scores of the 4-PS checkpoint.
    want = score_saved_model(path, inputs)
    assert np.abs(want - at_checkpoint).max() > 1e-3
    np.testing.assert_allclose(served, want, rtol=1e-5, atol=1e-6)


def _capped_serve(groups, base_path, model_dir, tmp_path):
    """`tfps serve --follow model_dir` of the export under base_path in the memory group "serve",
    on port 0 and a free REST port: the Popen, whose first line on stdout is the ready line."""
    procs = groups.procs("serve")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        rest = s.getsockname()[1]
    return subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "tfps"), "serve", "--port", "0",
                             "--rest_api_port", str(rest), "--model_base_path", str(base_path), "--model_name", "demo",
                             "--follow", str(model_dir), "--file_system_poll_wait_seconds", "0.2"],
                            preexec_fn=lambda: cgroups.join(procs), stdout=subprocess.PIPE,
                            stderr=open(tmp_path / "serve.err", "w"), text=True)


def _served_step(port):
    """The step of the tables `tfps serve` on REST `port` serves (its metadata's tfps_state)."""
    status, body = _rest(port, "/v1/models/demo/metadata")
    assert status == 200, body
    return body["metadata"]["tfps_state"]["step"]


def _capped_export(sets, export_dir, cap):
    """`tfps export` (stock) in a memory cgroup of its own capped at `cap` bytes: the SavedModel's
    path and a reader of its variables."""
    groups = cgroups.TaskGroups.make(os.getpid(), {"export": cap})
    try:
        procs = groups.procs("export")
        done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "tfps"), "export", "--config",
                               "configs/demo.yaml", "--format", "stock", "--export-dir", str(export_dir)]
                              + [a for s in sets for a in ("--set", s)],
                              preexec_fn=lambda: cgroups.join(procs), capture_output=True, text=True, timeout=300,
                              cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        assert done.returncode == 0, (groups.oom_kills("export"), done.stderr[-3000:])
        assert groups.oom_kills("export") in (0, None)
    finally:
        groups.close()
    path = json.loads(done.stdout.strip().splitlines()[-1])["saved_model"]
    return path, tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))


def _rows(model_dir, chain=None):
    """The table of model_dir's newest cut (its checkpoint, and its deltas applied in a session of
    its own, as a resume does), or of checkpoint `model_dir` and the deltas `chain`, sorted by
    key, and the bytes it holds in a table."""
    from tfps.state import deltas
    from tfps.embedding.variable import get_embedding_variable
    if chain is None:
        checkpoint, chain, step = deltas.latest_cut(model_dir)
        assert step == 20, (checkpoint, chain, step)
    else:
        checkpoint = model_dir
    reader = tf.train.load_checkpoint(checkpoint)
    (table,) = layout.table_names(reader.get_variable_to_shape_map())
    dim = int(reader.get_variable_to_shape_map()[f"{table}-slot_init"][0] and
              layout.table_shapes(reader, table)["values"][1])
    with tf.Graph().as_default():
        ev = get_embedding_variable(table, dim, num_shards=2)
        restore = tfps.embedding.checkpoint_tools.restore_table(checkpoint, ev)
        prefix = tf.compat.v1.placeholder(tf.string, [])
        apply = deltas.apply_tables_op([ev], prefix)
        export = ev.export()
        stats = ev.memory_stats()
        with tf.compat.v1.Session() as s:
            s.run(restore)
            for _, delta in chain:
                s.run(apply, {prefix: delta})
            rows, used = s.run([export, stats["bytes_in_use"]])
    order = np.argsort(rows["keys"])
    return {"keys": rows["keys"][order], "freq": rows["freq"][order], "values": rows["values"][order],
            "last_step": rows["last_step"][order], "bytes": int(used)}
