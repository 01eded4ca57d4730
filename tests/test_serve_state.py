"""tfps serve and the model's state: --follow applies a trainer's checked deltas to the served
tables (and refuses another model's), an export that does not fit its config is refused, and
metadata reports the served fingerprint and step. Shares test_serve.py's trained model."""
import json
import os
import shutil
import time

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import get_model_metadata_pb2

from tfps.config import load_config
from tfps.embedding import layout
from tfps.runner.incremental import IncrementalCheckpoints
from tfps.runner.job import export
from tfps.serving.servable import read_export_manifest
from tfps.state.manifest import StateMismatch
from serve_client import _request, _rest, _stub
from test_serve import SETS, _cfg, _polls, _predict_export, _rows, _server, _train

pytestmark = pytest.mark.slow
POLL_SECS = 0.2   # how often the server polls model_dir


@pytest.mark.parametrize("export_format", ["tfps", "stock"])
def test_follow_applies_the_trainers_deltas_to_the_served_tables(trained, tmp_path, export_format):
    """Either export format: a stock export's tables take the deltas through stock insert and
    remove ops (tfps.embedding.stock), and serve what a tfps export of the same cut serves."""
    cfg = _cfg(tmp_path / "model")
    served_export = trained["export"] if export_format == "tfps" else export(
        trained["cfg"], str(tmp_path / "stock"), "stock")
    shutil.copytree(trained["cfg"].model_dir, cfg.model_dir)
    # On a cluster the saver names a checkpoint by a global step it read before the save, so it
    # can hold a later one: the chain continues from the step it holds, not from its name.
    for path in tf.io.gfile.glob(os.path.join(str(cfg.model_dir), "model.ckpt-40.*")):
        os.rename(path, path.replace("model.ckpt-40", "model.ckpt-39"))
    tf.compat.v1.train.update_checkpoint_state(str(cfg.model_dir), os.path.join(str(cfg.model_dir), "model.ckpt-39"))
    server = _server(os.path.dirname(served_export), poll_secs=POLL_SECS, follow=str(cfg.model_dir))
    stub = _stub(server.port)
    rows = trained["rows"]

    def served():
        return tf.make_ndarray(stub.Predict(_request(rows), timeout=30).outputs["probabilities"])
    try:
        np.testing.assert_allclose(served(), trained["want"], rtol=1e-5, atol=1e-6)
        # More training that writes deltas only (no full checkpoint: both savers off).
        inc = IncrementalCheckpoints(str(cfg.model_dir), every_steps=10, printer=lambda *a, **k: None)
        _train(cfg, 70, hooks=[inc], save_checkpoints_steps=None, save_checkpoints_secs=None)
        assert inc.deltas_written == 3
        # the deltas applied (the follower's own record; the timely part is checked on its lags)
        deadline = time.monotonic() + 120
        while [s for _, kind, s in server.store.follower.applied if kind == "delta"] != [50, 60, 70]:
            assert time.monotonic() < deadline, server.store.follower.applied
            time.sleep(0.05)
        # each delta was applied within a poll or so of appearing: the follower's measured lag at most
        # 10 poll intervals (5x and more what one poll and an apply take)
        assert len(server.store.follower.lags) == 3 and max(server.store.follower.lags) < 10 * POLL_SECS, \
            server.store.follower.lags
        # The oracle: an export of the newest cut (the checkpoint of step 40 and the deltas up to
        # 70: tables, dense variables and global step), cut at step 70.
        cut = export(cfg, str(tmp_path / "cut"))
        assert read_export_manifest(cut)["step"] == 70
        assert read_export_manifest(cut)["fingerprint"] == read_export_manifest(trained["export"])["fingerprint"]
        oracle = _predict_export(cut, rows)
        assert np.abs(oracle - trained["want"]).max() > 1e-3   # the deltas change the scores
        np.testing.assert_allclose(served(), oracle, rtol=1e-5, atol=1e-6)
        assert server.store.loaded()[int(os.path.basename(served_export))].state()["step"] == 70
        # A damaged delta (its index without its data) is refused; the served tables stay.
        with open(os.path.join(cfg.model_dir, "delta-80.index"), "wb") as f:
            f.write(b"\x00" * 64)
        _polls(server, 2)
        assert [s for _, _, s in server.store.follower.applied][-1] == 70
        np.testing.assert_allclose(served(), oracle, rtol=1e-5, atol=1e-6)
        # So is a full checkpoint whose data file is cut short: nothing of it is applied.
        latest = tf.train.latest_checkpoint(str(cfg.model_dir))
        damaged = os.path.join(str(cfg.model_dir), "model.ckpt-999")
        for path in tf.io.gfile.glob(latest + ".*"):
            data = open(path, "rb").read()
            with open(damaged + path[len(latest):], "wb") as f:
                f.write(data if path.endswith(".index") else data[:len(data) * 2 // 3])
        tf.compat.v1.train.update_checkpoint_state(str(cfg.model_dir), damaged)
        _polls(server, 2)
        assert [s for _, _, s in server.store.follower.applied][-1] == 70
        np.testing.assert_allclose(served(), oracle, rtol=1e-5, atol=1e-6)
    finally:
        server.stop()


def test_follow_of_another_model_changes_nothing(trained, tmp_path):
    """--follow of a model_dir whose model differs (an MLP of another width; the same shapes with
    another learning rate): nothing of it is applied, the answers stay bit-identical, and the
    served state is still the export's."""
    version = int(os.path.basename(trained["export"]))
    for i, change in enumerate(["model.hidden_units=[8]", "train.learning_rate=0.25"]):
        other = _cfg(tmp_path / f"other{i}", change)
        _train(other, 20)
        server = _server(os.path.dirname(trained["export"]), poll_secs=0.2, follow=str(other.model_dir))
        try:
            stub = _stub(server.port)
            before = tf.make_ndarray(stub.Predict(_request(trained["rows"]), timeout=30).outputs["probabilities"])
            _polls(server, 3)
            after = tf.make_ndarray(stub.Predict(_request(trained["rows"]), timeout=30).outputs["probabilities"])
            assert server.store.follower.applied == []
            assert version in server.store.follower.mismatch   # and it says so, though nothing is newer
            np.testing.assert_array_equal(after, before)
            np.testing.assert_allclose(before, trained["want"], rtol=1e-5, atol=1e-6)
            assert server.store.loaded()[version].state()["step"] == 40
        finally:
            server.stop()


def test_export_of_a_config_that_does_not_fit_is_refused(trained, tmp_path, cli):
    """`tfps export` with model.hidden_units changed: refused naming the variable, no SavedModel."""
    cfg = load_config("configs/demo.yaml", SETS + [f"model_dir={trained['cfg'].model_dir}",
                                                    "model.hidden_units=[8]"])
    with pytest.raises(StateMismatch, match="variable 'mlp_0/bias'"):
        export(cfg, str(tmp_path / "export"))
    assert not os.path.exists(tmp_path / "export") or not os.listdir(tmp_path / "export")
    code, _, err = cli("export", "--config", "configs/demo.yaml", *[a for x in SETS for a in ("--set", x)],
                       "--set", f"model_dir={trained['cfg'].model_dir}", "--set", "model.hidden_units=[8]",
                       "--export-dir", str(tmp_path / "cli"))
    assert code == 2, err
    assert not os.path.exists(tmp_path / "cli") or not os.listdir(tmp_path / "cli")


def test_metadata_reports_the_fingerprint_and_step(trained):
    from google.protobuf import struct_pb2
    manifest = read_export_manifest(trained["export"])
    assert manifest["step"] == 40 and len(manifest["fingerprint"]) == 16
    server = _server(os.path.dirname(trained["export"]))
    try:
        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        request.model_spec.name = "demo"
        response = _stub(server.port).GetModelMetadata(request, timeout=30)
        state = struct_pb2.Struct()
        response.metadata["tfps_state"].Unpack(state)
        assert dict(state) == {"fingerprint": manifest["fingerprint"], "step": 40.0}
        status, body = _rest(server.rest_api_port, "/v1/models/demo/metadata")
        assert status == 200 and body["metadata"]["tfps_state"] == {"fingerprint": manifest["fingerprint"], "step": 40}
    finally:
        server.stop()


def _tree(model_dir):
    """{name: bytes} of model_dir's files: what a refused run must leave as it was."""
    return {p.name: p.read_bytes() for p in sorted(model_dir.iterdir()) if p.is_file()}


def test_inspect_shows_the_newest_cut_and_every_reader_refuses_a_partial_copy(trained, tmp_path, cli):
    """A model_dir whose newest cut is the checkpoint of step 40 and deltas 50, 60, 70:
    - `tfps inspect` shows that cut (the step an export of it is cut at: the oracle) and every
      merged feature by the name the model gave it;
    - with delta 60 gone, it shows the usable cut before the gap and the deltas a resume refuses
      (those train's own check names);
    - a partial copy of a newer checkpoint (its index without its data file, no `checkpoint`
      file): `tfps train`, `tfps export` and `tfps inspect` refuse it (exit 2, model_dir and the
      export directory left as they were), and `tfps serve --follow` applies nothing until the
      partial copy is gone, then the whole chain."""
    from tfps.data.sources import schema_of
    from tfps.state import deltas
    cfg = _cfg(tmp_path / "model")
    shutil.copytree(trained["cfg"].model_dir, cfg.model_dir)
    inc = IncrementalCheckpoints(str(cfg.model_dir), every_steps=10, printer=lambda *a, **k: None)
    _train(cfg, 70, hooks=[inc], save_checkpoints_steps=None, save_checkpoints_secs=None)
    model_dir = tmp_path / "model"
    code, out, err = cli("inspect", str(model_dir))
    assert code == 0, err[-2000:]
    shown = json.loads(out.strip().splitlines()[-1])
    cut = export(cfg, str(tmp_path / "cut"))
    assert (shown["state"]["checkpoint"], shown["state"]["deltas"], shown["state"]["step"]) == \
        ("model.ckpt-40", [50, 60, 70], read_export_manifest(cut)["step"])
    assert {f["feature"] for t in shown["tables"] for f in t["features"]} == set(schema_of(cfg).id_features)

    gap = tmp_path / "gap"
    shutil.copytree(model_dir, gap)
    for path in gap.glob("delta-60.*"):
        path.unlink()
    with pytest.raises(deltas.DeltaRefused) as refused:
        deltas.latest_cut(str(gap))
    code, out, err = cli("inspect", str(gap))
    assert code == 0, err[-2000:]
    state = json.loads(out.strip().splitlines()[-1])["state"]
    assert (state["deltas"], state["step"]) == ([50], 50)
    assert state["refused_files"] == [os.path.basename(p) for p in refused.value.files] == ["delta-70"]

    truncated = tmp_path / "truncated"   # a delta whose data file is cut short: read whole, as a restore reads it
    shutil.copytree(model_dir, truncated)
    data = max(truncated.glob("delta-70.data-*"), key=os.path.getsize)   # the table's part
    data.write_bytes(data.read_bytes()[:len(data.read_bytes()) // 2])
    code, out, err = cli("inspect", str(truncated))
    assert code == 0, err[-2000:]
    state = json.loads(out.strip().splitlines()[-1])["state"]
    assert (state["deltas"], state["step"], state["refused_files"]) == ([50, 60], 60, ["delta-70"])
    with pytest.raises(deltas.DeltaRefused):   # as train's restore refuses it
        deltas.delta_chain(str(truncated), 40)

    (model_dir / "checkpoint").unlink()
    for suffix in (".index", ".meta"):   # copied without its data file
        shutil.copy(model_dir / f"model.ckpt-40{suffix}", model_dir / f"model.ckpt-75{suffix}")
    before = _tree(model_dir)
    sets = [a for s in SETS + [f"model_dir={model_dir}"] for a in ("--set", s)]
    for argv in (["train", *sets, "--set", "train.steps=90"],
                 ["export", *sets, "--export-dir", str(tmp_path / "refused")], ["inspect", str(model_dir)]):
        code, _, err = cli(argv[0], "--config", "configs/demo.yaml", *argv[1:]) if argv[0] != "inspect" else \
            cli(*argv)
        assert code == 2, (argv[0], err[-2000:])
        assert _tree(model_dir) == before, argv[0]
    assert not os.path.exists(tmp_path / "refused") or os.listdir(tmp_path / "refused") == []

    server = _server(os.path.dirname(trained["export"]), poll_secs=POLL_SECS, follow=str(model_dir))
    try:
        _polls(server, 3)
        assert server.store.follower.applied == []   # the partial copy stops it: nothing applied
        for suffix in (".index", ".meta"):
            (model_dir / f"model.ckpt-75{suffix}").unlink()
        deadline = time.monotonic() + 120
        while [s for _, kind, s in server.store.follower.applied if kind == "delta"] != [50, 60, 70]:
            assert time.monotonic() < deadline, server.store.follower.applied
            time.sleep(0.05)
    finally:
        server.stop()



@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory):
    """A model of 3 tables (3 id features, merge_tables off) checkpointed at steps 10 and 20:
    exports of step 10 in both formats, and the scores of an export of step 20 on the rows."""
    root = tmp_path_factory.mktemp("two_checkpoints")
    cfg = _cfg(root / "model", "model.merge_tables=false", "data.num_categorical=3",
               "data.num_interacting=3")
    _train(cfg, 10)
    rows = {k: v[:32] for k, v in _rows(cfg).items()}
    exports = {f: export(cfg, str(root / f), f) for f in ("tfps", "stock")}
    _train(cfg, 20)
    return dict(cfg=cfg, rows=rows, exports=exports, at_20=_predict_export(export(cfg, str(root / "20")), rows))


@pytest.mark.xdist_group("two_checkpoints")
@pytest.mark.parametrize("export_format", ["tfps", "stock"])
def test_a_full_checkpoint_with_one_damaged_table_changes_no_table(two_checkpoints, tmp_path, export_format):
    """A newer full checkpoint of the 3 tables whose last table's values have a byte flipped is
    refused whole by --follow: every table is read and checked before any is put in, so none
    changes and the scores stay the exported ones, bit for bit. Once the byte is back, the next
    poll applies it and the scores are those of an export of step 20."""
    rows, served_export = two_checkpoints["rows"], two_checkpoints["exports"][export_format]
    model_dir = str(tmp_path / "model")
    shutil.copytree(two_checkpoints["cfg"].model_dir, model_dir)
    newer = tf.train.latest_checkpoint(model_dir)
    reader = tf.train.load_checkpoint(newer)
    last = layout.table_names(reader.get_variable_to_shape_map())[-1]
    head = reader.get_tensor(f"{last}-part0-values").tobytes()[:64]
    (data,) = [p for p in tf.io.gfile.glob(newer + ".data-*") if head in open(p, "rb").read()]
    blob = bytearray(open(data, "rb").read())
    assert blob.count(head) == 1
    at = blob.find(head) + 8
    blob[at] ^= 0xFF
    open(data, "wb").write(bytes(blob))
    want = _predict_export(served_export, rows)
    assert np.abs(two_checkpoints["at_20"] - want).max() > 1e-4   # the newer checkpoint scores otherwise
    server = _server(os.path.dirname(served_export), poll_secs=POLL_SECS, follow=model_dir)
    stub = _stub(server.port)

    def served():
        return tf.make_ndarray(stub.Predict(_request(rows), timeout=30).outputs["probabilities"])
    try:
        _polls(server, 3)
        assert server.store.follower.applied == []
        np.testing.assert_array_equal(served(), want)
        blob[at] ^= 0xFF
        open(data, "wb").write(bytes(blob))
        _polls(server, 2)
        assert [(kind, step) for _, kind, step in server.store.follower.applied] == [("full", 20)]
        np.testing.assert_allclose(served(), two_checkpoints["at_20"], rtol=1e-5, atol=1e-6)
    finally:
        server.stop()
