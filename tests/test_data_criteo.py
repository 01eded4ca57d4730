"""The Criteo text reader against a plain-Python parse of tiny hand-written files."""
import gzip
import math

import numpy as np
import pytest
import tensorflow as tf

from tfps.data.criteo import MISSING_BUCKET, NUM_CATEGORICAL, NUM_INTEGER, criteo_dataset
from tfps.data.schema import numpy_batches


def _row(label, ints, cats):
    return "\t".join([str(label)] + [str(x) for x in ints] + list(cats))


ROWS = [
    _row(1, [5, "", 0, 1, 2, 3, 100, -4, "", 7, 8, 9, 10], ["68fd1e64", ""] + ["a"] * 24),
    _row(0, [""] * NUM_INTEGER, [""] * NUM_CATEGORICAL),
    _row(0, list(range(NUM_INTEGER)), [f"{i:08x}" for i in range(NUM_CATEGORICAL)]),
]


def _expected(line):
    """The features of one line, computed in plain Python (the oracle)."""
    fields = line.split("\t")
    dense, ids = [], []
    for j, text in enumerate(fields[1:1 + NUM_INTEGER]):
        if text == "":
            dense.append(0.0)
            ids.append((j << 32) | MISSING_BUCKET)
            continue
        x = int(text)
        dense.append(math.log1p(max(x, 0)))
        bucket = math.floor(math.log(x) ** 2) if x > 2 else x
        ids.append((j << 32) | (bucket & 0x7FFFFFFF))
    return float(fields[0]), np.array(dense, np.float32), ids, fields[1 + NUM_INTEGER:]


def _read(paths, **kwargs):
    return list(numpy_batches(lambda: criteo_dataset(paths, **kwargs)))


def _check(batches, lines):
    features = {k: np.concatenate([b[0][k] for b in batches]) for k in ("dense", "ids")}
    labels = np.concatenate([b[1] for b in batches])
    assert len(labels) == len(lines)
    with tf.Graph().as_default(), tf.compat.v1.Session() as s:
        for i, line in enumerate(lines):
            label, dense, int_ids, cats = _expected(line)
            assert labels[i] == label
            np.testing.assert_allclose(features["dense"][i], dense, rtol=1e-6)
            assert features["ids"][i, :NUM_INTEGER].tolist() == int_ids
            hashed = s.run(tf.strings.to_hash_bucket_fast(cats, 2**63 - 1))   # TF's own hash
            assert features["ids"][i, NUM_INTEGER:].tolist() == hashed.tolist()


def test_plain_gzip_and_several_files_match_a_python_parse(tmp_path):
    plain, zipped = tmp_path / "a.txt", tmp_path / "b.txt.gz"
    plain.write_text("\n".join(ROWS[:2]) + "\n")
    with gzip.open(zipped, "wt") as f:
        f.write(ROWS[2] + "\n" + ROWS[0] + "\n")
    batches = _read([str(plain), str(zipped)], batch_size=3)
    assert [len(b[1]) for b in batches] == [2, 2]           # a batch ends with its file
    _check(batches, ROWS[:2] + [ROWS[2], ROWS[0]])


@pytest.mark.parametrize("bad,reason", [
    ("1\t2\t3", "has 3 tab-separated fields, expected 40"),
    (_row(1, [1, "x1"] + [1] * 11, ["a"] * 26), "has I2 = 'x1', not an integer"),
    (_row(2, [1] * 13, ["a"] * 26), "has label '2', expected 0 or 1"),
])
def test_a_malformed_row_is_named_or_skipped_and_counted(tmp_path, bad, reason):
    path = tmp_path / "day.txt"
    path.write_text("\n".join([ROWS[0], ROWS[1], bad, ROWS[2]]) + "\n")
    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        _read([str(path)], batch_size=2)
    message = str(err.value)
    assert str(path) in message and "line" in message and "3" in message and reason in message
    batches = _read([str(path)], batch_size=2, skip_bad_rows=True)
    assert sum(int(b[0]["bad_rows"]) for b in batches) == 1
    _check(batches, [ROWS[0], ROWS[1], ROWS[2]])


def test_trainers_read_interleaved_batches(tmp_path):
    path = tmp_path / "day.txt"
    path.write_text("\n".join(ROWS * 4) + "\n")             # 12 rows, batches of 2: 6 batches
    whole = _read([str(path)], batch_size=2)
    shares = [_read([str(path)], batch_size=2, shard_index=k, num_shards=3) for k in range(3)]
    for k in range(3):
        assert len(shares[k]) == 2
        for got, want in zip(shares[k], whole[k::3]):
            np.testing.assert_array_equal(got[0]["ids"], want[0]["ids"])


def test_empty_lines_are_not_rows_and_a_bad_row_counts_once_over_passes(tmp_path):
    path = tmp_path / "day.txt"
    path.write_text("\n".join([ROWS[0], "", ROWS[1], "1\t2", ROWS[2], "", ""]) + "\n\n")
    batches = _read([str(path)], batch_size=3, skip_bad_rows=True)
    _check(batches, [ROWS[0], ROWS[1], ROWS[2]])
    assert sum(int(b[0]["bad_rows"]) for b in batches) == 1
    # two batches a pass: the third, of empty lines only, is dropped
    three_passes = list(numpy_batches(lambda: criteo_dataset([str(path)], 3, skip_bad_rows=True, repeat=True).take(6)))
    assert [len(b[1]) for b in three_passes[:2]] == [2, 1]
    assert sum(len(b[1]) for b in three_passes) == 9 and sum(int(b[0]["bad_rows"]) for b in three_passes) == 1
