"""The Criteo text reader against a plain-Python parse of tiny hand-written files."""
import gzip
import math
import os

import numpy as np
import pytest
import tensorflow as tf

from tfps.config import load_config
from tfps.data.convert import convert
from tfps.data.criteo import MISSING_BUCKET, NUM_CATEGORICAL, NUM_INTEGER, criteo_dataset
from tfps.data.file_source import DataMissing, EvalSetEmpty
from tfps.data.schema import numpy_batches
from tfps.data.sources import make_source
from tfps.errors import ReaderError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


@pytest.mark.parametrize("missing", ["data/criteo/train.txt", "data/criteo/day_*.gz", "empty_dir"])
@pytest.mark.parametrize("key", ["data.path", "data.eval_path"])
def test_a_missing_file_glob_or_directory_is_data_missing_naming_it_and_the_page_that_says_where_to_get_it(
        tmp_path, missing, key):
    """A shipped Criteo config whose training or eval data is not there (a file that does not
    exist, as data/criteo/ in a clean clone; a glob that matches nothing; a directory without
    files): DataMissing naming the key, the path and a docs page that is there; `tfps convert`
    of it names itself ("convert")."""
    there = tmp_path / "day.txt"
    there.write_text("\n".join(ROWS) + "\n")
    (tmp_path / "empty_dir").mkdir()
    path = str(tmp_path / missing)
    other = "data.eval_path" if key == "data.path" else "data.path"
    with pytest.raises(DataMissing) as raised:
        make_source(load_config("configs/criteo_deepfm.yaml", [f"{key}={path}", f"{other}={there}"]))
    assert (raised.value.what, raised.value.path) == (key, path)
    assert os.path.isfile(os.path.join(ROOT, raised.value.docs))
    with pytest.raises(DataMissing) as raised:
        convert("criteo", path, str(tmp_path / "out"), printer=lambda *a, **k: None)
    assert (raised.value.what, raised.value.path) == ("convert", path)


def test_an_eval_file_is_checked_up_to_its_first_good_row(tmp_path):
    """check_eval_rows, before training: an eval file of malformed rows only is EvalSetEmpty naming
    it and its rows skipped (data.skip_bad_rows); without data.skip_bad_rows a malformed row
    before the first good one is the reader's error naming it, one after it is not the check's
    (the evaluation meets it: the check reads no further)."""
    train, bad = tmp_path / "train.txt", tmp_path / "bad.txt"
    train.write_text("\n".join(ROWS) + "\n")
    bad.write_text("1\t2\n" * 40 + "\n" + "x\t" * 39 + "y\n")   # 41 rows and an empty line, none good
    bad_first, good_first = tmp_path / "bad_first.txt", tmp_path / "good_first" / "a.txt"
    bad_first.write_text("\n".join(["1\t2", ROWS[0]]) + "\n")
    good_first.parent.mkdir()
    good_first.write_text("\n".join([ROWS[0], "1\t2"]) + "\n")
    (tmp_path / "good_first" / "b.txt").write_text("1\t2\n")

    def check(eval_path, skip):
        make_source(load_config("configs/criteo_deepfm.yaml", [
            f"data.path={train}", f"data.eval_path={eval_path}", f"data.skip_bad_rows={skip}"])).check_eval_rows()
    with pytest.raises(EvalSetEmpty) as raised:
        check(bad, "true")
    assert (raised.value.path, raised.value.bad_rows) == (str(bad), 41)
    with pytest.raises(ReaderError) as raised:
        check(bad_first, "false")
    assert (raised.value.reader, raised.value.file, raised.value.line) == ("criteo", str(bad_first), 1)
    check(bad_first, "true")
    check(good_first.parent, "false")


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


# -- gzip files that end early (tfps.data.lines): an error naming the file, or one counted bad row

MANY = [_row(i % 2, [i] + [1] * 12, [f"{i:08x}"] * 26) for i in range(25)]


def _gzip_with_marks(path, parts):
    """Writes the parts (bytes) as one gzip member, flushed after each: returns the file's size
    after each part (a cut there decompresses to exactly the parts before it)."""
    marks = []
    with open(path, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb") as f:
            for part in parts:
                f.write(part)
                f.flush()
                marks.append(raw.tell())
    return marks


def _cuts(tmp_path):
    """{kind: (file bytes, the whole rows before the cut, or None when not known exactly)} of
    MANY written as gzip and cut or damaged."""
    text = [(line + "\n").encode() for line in MANY]
    mid = len(text[12]) // 2
    whole = tmp_path / "whole.gz"
    marks = _gzip_with_marks(whole, [b"".join(text[:12]), text[12][:mid], text[12][mid:] + b"".join(text[13:])])
    data = whole.read_bytes()
    crc = bytearray(data)
    crc[-8] ^= 1                                              # the trailer's CRC
    return {"mid_trailer": (data[:-3], MANY), "no_trailer": (data[:-8], MANY),
            "at_line_end": (data[:marks[0]], MANY[:12]), "mid_line": (data[:marks[1]], MANY[:12]),
            "mid_stream": (data[:(marks[1] + marks[2]) // 2], None), "bad_crc": (bytes(crc), MANY)}


def test_a_whole_gzip_file_reads_every_row(tmp_path):
    path = tmp_path / "whole.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(MANY) + "\n")
    _check(_read([str(path)], batch_size=4), MANY)


@pytest.mark.parametrize("kind", ["mid_trailer", "no_trailer", "at_line_end", "mid_line", "mid_stream", "bad_crc"])
def test_a_gzip_file_that_ends_early_is_an_error_naming_it_or_a_counted_bad_row(tmp_path, kind):
    data, before = _cuts(tmp_path)[kind]
    path = tmp_path / f"{kind}.gz"
    path.write_bytes(data)
    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        _read([str(path)], batch_size=4)
    assert str(path) in err.value.message and "truncated" in err.value.message
    if before is not None and kind != "bad_crc":   # the line where the data ends (a CRC is checked at the end)
        assert f" line {len(before) + 1}: " in err.value.message
    batches = _read([str(path)], batch_size=4, skip_bad_rows=True)
    assert sum(int(b[0]["bad_rows"]) for b in batches) == 1
    read = sum(len(b[1]) for b in batches)
    _check(batches, MANY[:read] if before is None else before)
    assert before is not None or read < len(MANY)
    # a repeated input counts it once, on the first pass (the second has no batch of it: one less)
    two = list(numpy_batches(lambda: criteo_dataset([str(path)], 4, skip_bad_rows=True, repeat=True).take(
        2 * len(batches) - 1)))
    assert sum(int(b[0]["bad_rows"]) for b in two) == 1 and sum(len(b[1]) for b in two) == 2 * read


def _ends_within(make_dataset, limit, seconds=60):
    """Reads up to `limit` batches of make_dataset() in a thread: (batches read, error raised);
    an AssertionError when the read has not ended within `seconds` (an endless skip)."""
    import threading
    box = {}

    def read():
        try:
            box["batches"] = list(numpy_batches(lambda: make_dataset().take(limit)))
        except tf.errors.OpError as e:
            box["error"] = e
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"reading did not end within {seconds} s"
    return box.get("batches"), box.get("error")


@pytest.mark.parametrize("start", [0, 1])
def test_an_endless_read_of_rows_that_are_all_bad_is_an_error_after_a_pass(tmp_path, start):
    """Every row malformed, skip_bad_rows on: the endless reader fails after one whole pass (from
    a resumed position too) instead of skipping forever; with one good row it reads on."""
    path = tmp_path / "day.txt"
    bad = ["1\t2", _row(2, [1] * 13, ["a"] * 26), _row(1, [1, "x"] + [1] * 11, ["a"] * 26)] * 3
    path.write_text("\n".join(bad) + "\n")
    batches, error = _ends_within(lambda: criteo_dataset([str(path)], batch_size=2, skip_bad_rows=True, repeat=True,
                                                         start=start), limit=1000)
    assert isinstance(error, tf.errors.InvalidArgumentError), (batches, error)
    path.write_text("\n".join(bad + [ROWS[0]]) + "\n")
    batches, error = _ends_within(lambda: criteo_dataset([str(path)], batch_size=2, skip_bad_rows=True, repeat=True,
                                                         start=start), limit=20)
    assert error is None and len(batches) == 20
    assert sum(len(b[1]) for b in batches) >= 3   # the good row, once per pass


def test_integers_of_19_digits_within_int64_are_read_and_beyond_it_refused(tmp_path):
    """int64's extremes read as Python computes them; one past int64 is a bad row (refused, or
    skipped and counted), not a wrapped value."""
    extremes = _row(1, [9223372036854775807, -9223372036854775808, 1000000000000000000] + [1] * 10, ["a"] * 26)
    beyond = _row(0, [1, 9999999999999999999] + [1] * 11, ["a"] * 26)
    path = tmp_path / "day.txt"
    path.write_text(extremes + "\n")
    _check(_read([str(path)], batch_size=2), [extremes])
    path.write_text(extremes + "\n" + beyond + "\n")
    with pytest.raises(tf.errors.InvalidArgumentError):
        _read([str(path)], batch_size=2)
    batches = _read([str(path)], batch_size=2, skip_bad_rows=True)
    assert sum(int(b[0]["bad_rows"]) for b in batches) == 1
    _check(batches, [extremes])
