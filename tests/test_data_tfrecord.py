"""TFRecords: what tfps convert writes reads back as the text readers read it; a hand-written spec
reads hand-made Examples as a Python reading of them says."""
import dataclasses
import os

import numpy as np
import pytest
import tensorflow as tf
import yaml

import ml_tiny
from test_data_criteo import ROWS
from tfps.config import load_config
from tfps.data.convert import convert
from tfps.data.criteo import criteo_dataset
from tfps.data.file_source import DataMissing, EvalSetEmpty
from tfps.data.movielens import movielens_dataset
from tfps.data.schema import numpy_batches
from tfps.data.sources import make_source, schema_of
from tfps.data.tfrecord import SPEC_FILE, files_of, schema_of as spec_schema, tfrecord_dataset
from tfps.errors import ReaderError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(make):
    return list(numpy_batches(make))


def _cat(batches, key):
    return np.concatenate([b[0][key] for b in batches])


def test_criteo_converted_reads_back_as_the_text_reader_reads(tmp_path):
    text = tmp_path / "day.txt"
    text.write_text("\n".join(ROWS * 3 + ["1\t2"]) + "\n")        # one malformed row, skipped
    result = convert("criteo", str(text), str(tmp_path / "rec"), skip_bad_rows=True, rows_per_file=4, printer=None)
    assert result["outputs"][0]["rows"] == 9 and result["outputs"][0]["bad_rows"] == 1
    assert len(files_of(str(tmp_path / "rec"))) == 3
    want = _read(lambda: criteo_dataset([str(text)], 4, skip_bad_rows=True))
    cfg = load_config(None, ["data.format=tfrecord", f"data.path={tmp_path / 'rec'}"])
    source_schema = schema_of(cfg)                                 # from the written tfps_features.yaml
    assert source_schema == dataclasses.replace(source_schema, id_features=tuple(
        [f"I{j + 1}" for j in range(13)] + [f"C{j + 1}" for j in range(26)]))
    specs = result["data"]["features"]
    got = _read(lambda: tfrecord_dataset(files_of(str(tmp_path / "rec")), 4, specs))
    for key in ("dense", "ids"):
        np.testing.assert_array_equal(_cat(got, key), _cat(want, key))
    np.testing.assert_array_equal(np.concatenate([b[1] for b in got]), np.concatenate([b[1] for b in want]))


def test_movielens_converted_keeps_the_split_and_every_feature(tmp_path):
    directory = ml_tiny.write(tmp_path)
    out = tmp_path / "rec"
    result = convert("movielens", directory, str(out), printer=None)
    assert [o["rows"] for o in result["outputs"]] == [13, 3]     # users of 5, 1 and 10 ratings: 1 + 0 + 2 in eval
    for split in ("train", "eval"):
        want = _read(lambda: movielens_dataset(directory, 100, split))
        cfg = load_config(None, ["data.format=tfrecord", f"data.path={out / 'train'}", f"data.eval_path={out / 'eval'}"])
        source = make_source(cfg)
        assert source.schema == dataclasses.replace(source.schema, list_features=("genres",), has_users=True)
        fn = source.train_input_fn(100) if split == "train" else source.eval_input_fn(100)
        got = _read(lambda: fn().take(1) if split == "train" else fn())
        rows = lambda b: sorted(zip(_cat(b, "ids").tolist(), _cat(b, "user").tolist(),   # noqa: E731
                                    [tuple(g for g in r if g != -1) for r in _cat(b, "genres").tolist()],
                                    _cat(b, "dense")[:, 0].tolist(), np.concatenate([x[1] for x in b]).tolist()))
        assert rows(got) == rows(want)


def _example(**features):
    def feature(v):
        if isinstance(v[0], float):
            return tf.train.Feature(float_list=tf.train.FloatList(value=v))
        if isinstance(v[0], bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=v))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=v))
    return tf.train.Example(features=tf.train.Features(feature={k: feature(v) for k, v in features.items()}))


def test_a_hand_written_spec_reads_every_feature_type(tmp_path):
    path = str(tmp_path / "x.tfrecord")
    examples = [dict(label=[1.0], price=[2.5], pos=[3, 4], country=[b"fr"], tags=[7, 8, 9], uid=[11]),
                dict(label=[0.0], price=[0.5], pos=[5, 6], country=[b"de"], tags=[1], uid=[12])]
    with tf.io.TFRecordWriter(path) as w:
        for e in examples:
            w.write(_example(**e).SerializeToString())
    specs = [{"name": "price", "type": "float"}, {"name": "pos", "type": "int", "length": 2, "names": ["a", "b"]},
             {"name": "country", "type": "string"}, {"name": "tags", "type": "int_list"}]
    assert spec_schema(specs, "uid").id_features == ("a", "b", "country")
    (features, labels), = _read(lambda: tfrecord_dataset([path], 8, specs, label="label", user="uid"))
    with tf.Graph().as_default(), tf.compat.v1.Session() as s:
        hashed = s.run(tf.strings.to_hash_bucket_fast(["fr", "de"], 2**63 - 1))
    np.testing.assert_array_equal(features["dense"], [[2.5], [0.5]])
    np.testing.assert_array_equal(features["ids"], [[3, 4, hashed[0]], [5, 6, hashed[1]]])
    np.testing.assert_array_equal(features["tags"], [[7, 8, 9], [1, -1, -1]])
    np.testing.assert_array_equal(features["user"], [11, 12])
    np.testing.assert_array_equal(labels, [1.0, 0.0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="weight"):   # a feature the records lack
        _read(lambda: tfrecord_dataset([path], 8, specs + [{"name": "weight", "type": "float"}]))


def test_without_a_spec_the_source_says_what_is_missing(tmp_path):
    (tmp_path / "x.tfrecord").write_bytes(b"")
    cfg = load_config(None, ["data.format=tfrecord", f"data.path={tmp_path}"])
    with pytest.raises(ValueError, match="data.features is empty"):
        make_source(cfg)


@pytest.mark.parametrize("missing", ["nothing", "nothing/*.tfrecord", "empty_dir"])
@pytest.mark.parametrize("key", ["data.path", "data.eval_path"])
def test_missing_records_are_data_missing_naming_the_path_and_the_page_that_says_where_to_get_them(
        tmp_path, missing, key):
    """Training or eval records not there (a path that does not exist, a glob that matches nothing,
    a directory without *.tfrecord* files), the features in the config or in the tfps_features.yaml
    beside the records: DataMissing naming the key, the path and a docs page that is there; the
    schema of a config whose data.path is missing too (not "data.features is empty")."""
    records = tmp_path / "rec"
    records.mkdir()
    _record_file(records / "part-00000.tfrecord")
    (records / SPEC_FILE).write_text(yaml.safe_dump({"features": SPECS, "label": "label"}))
    (tmp_path / "empty_dir").mkdir()
    path = str(tmp_path / missing)
    other = "data.eval_path" if key == "data.path" else "data.path"
    for features in ([f"data.features={SPECS}"], []):
        cfg = load_config(None, ["data.format=tfrecord", f"{key}={path}", f"{other}={records}"] + features)
        with pytest.raises(DataMissing) as raised:
            make_source(cfg)
        assert (raised.value.what, raised.value.path) == (key, path)
        assert os.path.isfile(os.path.join(ROOT, raised.value.docs))
        if key == "data.path" and not features:
            with pytest.raises(DataMissing):
                schema_of(cfg)


# -- files that end early: TF reads a file cut mid-header as a whole shorter one, and names no file

def _record_file(path, n=20):
    """n Examples (label, price, id i) written to path; returns their serialized forms."""
    records = [_example(label=[float(i % 2)], price=[i + 0.5], pos=[i]).SerializeToString() for i in range(n)]
    with tf.io.TFRecordWriter(str(path)) as w:
        for r in records:
            w.write(r)
    return records


SPECS = [{"name": "price", "type": "float"}, {"name": "pos", "type": "int"}]


def test_a_whole_tfrecord_file_reads_every_record(tmp_path):
    _record_file(tmp_path / "x.tfrecord")
    got = _read(lambda: tfrecord_dataset([str(tmp_path / "x.tfrecord")], 6, SPECS))
    assert _cat(got, "ids")[:, 0].tolist() == list(range(20))
    np.testing.assert_array_equal(_cat(got, "dense")[:, 0], np.arange(20) + 0.5)
    np.testing.assert_array_equal(np.concatenate([b[1] for b in got]), np.arange(20) % 2)


@pytest.mark.parametrize("kind", ["mid_record", "mid_header", "mid_last_crc", "no_last_crc", "corrupt"])
def test_a_tfrecord_file_that_ends_early_is_an_error_naming_it(tmp_path, kind):
    whole = tmp_path / "whole.tfrecord"
    records = _record_file(whole)
    data = bytearray(whole.read_bytes())
    at = sum(len(r) + 16 for r in records[:11])               # where record 11 (from 0) starts
    cut = {"mid_record": data[:at + 12 + len(records[11]) // 2], "mid_header": data[:at + 5],
           "mid_last_crc": data[:-2], "no_last_crc": data[:-4], "corrupt": data}[kind]
    if kind == "corrupt":
        cut[at + 14] ^= 0x40                                 # a byte of record 11's data: its CRC fails
    path = tmp_path / f"{kind}.tfrecord"
    path.write_bytes(bytes(cut))
    second = tmp_path / "second.tfrecord"
    _record_file(second)
    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        _read(lambda: tfrecord_dataset([str(path), str(second)], 6, SPECS))
    assert str(path) in err.value.message and "truncated" in err.value.message
    assert str(second) not in err.value.message


def test_the_sequence_records_that_end_early_are_an_error_naming_the_file(tmp_path):
    from tfps.data.sequences import read_samples, tfrecord_samples, write_tfrecords
    sample = {"user": np.int64(1), "profile": np.array([1, 2, 3]), "history_movie": np.array([4, 5]),
              "history_rating": np.array([3.0, 4.0], np.float32), "history_time": np.array([1, 2]),
              "realtime_movie": np.array([6]), "realtime_rating": np.array([5.0], np.float32),
              "realtime_time": np.array([3]), "candidate_movie": np.array([7, 8]), "candidate_time": np.array([4, 5]),
              "candidate_genres": np.zeros([2, 20], np.int64), "label": np.array([1.0, 0.0], np.float32),
              "cross": np.zeros([2, 5], np.float32)}
    write_tfrecords([sample] * 5, str(tmp_path))
    assert len(read_samples(lambda: tfrecord_samples(str(tmp_path)))) == 5
    path = tmp_path / "part-00000.tfrecord"
    path.write_bytes(path.read_bytes()[:-30])
    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        read_samples(lambda: tfrecord_samples(str(tmp_path)))
    assert str(path) in err.value.message and "truncated" in err.value.message


@pytest.mark.parametrize("bad", [{"price": [float("nan")]}, {"price": [float("inf")]}, {"label": [float("nan")]}])
def test_a_record_with_a_nan_or_infinite_float_is_an_error_naming_its_file_and_record(tmp_path, bad):
    """Record 8 of the second file holds a NaN or infinity: reading stops there with the file and
    the record's number (not later as a NaN loss), after the records before it."""
    first, second = tmp_path / "a.tfrecord", tmp_path / "b.tfrecord"
    _record_file(first)
    records = [_example(**{"label": [1.0], "price": [i + 0.5], "pos": [i], **(bad if i == 7 else {})})
               .SerializeToString() for i in range(12)]
    with tf.io.TFRecordWriter(str(second)) as w:
        for r in records:
            w.write(r)
    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        _read(lambda: tfrecord_dataset([str(first), str(second)], 4, SPECS))
    assert f"{second} line 8:" in err.value.message   # TfpsCheckRows' position: file and record number
    got = _read(lambda: tfrecord_dataset([str(first)], 4, SPECS))   # a clean file reads as before
    assert _cat(got, "ids")[:, 0].tolist() == list(range(20))


def test_eval_records_are_checked_up_to_the_first_good_one(tmp_path):
    """check_eval_rows, before training: eval files without a record (data.eval_path, or the one in
    tfps_features.yaml) are EvalSetEmpty naming them; a first record with a NaN is the reader's
    error naming its file and record; a readable eval set passes."""
    train, empty, nan = tmp_path / "train", tmp_path / "empty", tmp_path / "nan.tfrecord"
    for d in (train, empty):
        d.mkdir()
    _record_file(train / "part-00000.tfrecord")
    (empty / "part-00000.tfrecord").write_bytes(b"")
    (empty / "part-00001.tfrecord").write_bytes(b"")
    with tf.io.TFRecordWriter(str(nan)) as w:
        for i in range(3):
            w.write(_example(label=[1.0], price=[float("nan") if i == 0 else 0.5], pos=[i]).SerializeToString())
    (train / SPEC_FILE).write_text(yaml.safe_dump({"features": SPECS, "label": "label", "eval_path": str(empty)}))

    def source(*sets):
        return make_source(load_config(None, ["data.format=tfrecord", f"data.path={train}", *sets]))
    for sets in ([], [f"data.eval_path={empty}", f"data.features={SPECS}"]):
        with pytest.raises(EvalSetEmpty) as raised:
            source(*sets).check_eval_rows()
        assert raised.value.path == str(empty)
    with pytest.raises(ReaderError) as raised:
        source(f"data.eval_path={nan}").check_eval_rows()
    assert (raised.value.reader, raised.value.file, raised.value.line) == ("tfrecord", str(nan), 1)
    source(f"data.eval_path={train}").check_eval_rows()
