"""`tfps convert`: text data (Criteo logs, a MovieLens directory) to sharded TFRecords of
tf.train.Example, with the config data section that reads them back (DIR/tfps_features.yaml).

    convert("criteo", "day_0.gz", "out/")        # out/part-00000.tfrecord, ...
    convert("movielens", "ml-25m", "out/")       # out/train/..., out/eval/... (the time split)
"""
import os

import tensorflow as tf
import yaml

from tfps.data import criteo, movielens, sequences, tfrecord
from tfps.data.file_source import files as _files

BATCH = 4096


def _write(make_dataset, schema, out_dir, rows_per_file, printer, eval_dir=None):
    rows, bad, files = tfrecord.write_tfrecords(make_dataset, schema, out_dir, rows_per_file, printer)
    if not rows:
        raise ValueError(f"convert: the input has no rows to write to {out_dir}" +
                         (f" ({bad} malformed rows skipped)" if bad else ""))
    section = tfrecord.data_section(schema, out_dir, eval_dir)
    with tf.io.gfile.GFile(os.path.join(out_dir, tfrecord.SPEC_FILE), "w") as f:
        yaml.safe_dump(section, f, sort_keys=False)
    return {"dir": out_dir, "rows": rows, "bad_rows": bad, "files": len(files)}


def convert(kind, path, out_dir, skip_bad_rows=False, rows_per_file=1_000_000, eval_fraction=0.2, printer=print,
            sequence_options=None):
    """Converts and returns what was written: {"outputs": [{dir, rows, bad_rows, files}], "data": the
    config's data section for the (training) output}. Refuses an output directory that already
    holds TFRecords (they would be read with the new ones) and an input without rows.
    movielens_sequences writes MTGR's user samples (tfps.data.sequences; sequence_options: window,
    history_len, realtime_len)."""
    if rows_per_file <= 0:
        raise ValueError(f"convert: --rows-per-file must be > 0, got {rows_per_file}")
    for d in (out_dir, os.path.join(out_dir, "train"), os.path.join(out_dir, "eval")):
        if tf.io.gfile.isdir(d) and tf.io.gfile.glob(os.path.join(d, "*.tfrecord*")):
            raise ValueError(f"convert: {d} already holds TFRecords; remove them or choose another --to")
    if kind in ("movielens", "movielens_sequences"):
        movielens.check_directory(path, "convert")
    if kind == "criteo":
        files = _files(path, "convert")
        out = [_write(lambda: criteo.criteo_dataset(files, BATCH, skip_bad_rows), criteo.SCHEMA, out_dir, rows_per_file, printer)]
        return {"outputs": out, "data": tfrecord.data_section(criteo.SCHEMA, out_dir)}
    if kind == "movielens":
        train_dir, eval_dir = os.path.join(out_dir, "train"), os.path.join(out_dir, "eval")
        out = [_write(lambda split=split: movielens.movielens_dataset(path, BATCH, split, eval_fraction, skip_bad_rows),
                      movielens.SCHEMA, d, rows_per_file, printer, eval_dir if split == "train" else None)
               for split, d in (("train", train_dir), ("eval", eval_dir))]
        return {"outputs": out, "data": tfrecord.data_section(movielens.SCHEMA, train_dir, eval_dir)}
    if kind == "movielens_sequences":
        if skip_bad_rows:
            raise ValueError("convert: --skip-bad-rows is not supported with movielens_sequences (a user's samples "
                             "depend on all their ratings); fix or remove the malformed lines")
        written = sequences.write_sequence_tfrecords(path, out_dir, eval_fraction=eval_fraction,
                                                     rows_per_file=rows_per_file, **(sequence_options or {}))
        out = [{"dir": os.path.join(out_dir, split), "rows": w["samples"], "bad_rows": 0, "files": w["files"]}
               for split, w in written["splits"].items()]
        data = {"format": "movielens_sequences", "path": out_dir, **{k: written[k] for k in (
            "window", "history_len", "realtime_len", "eval_fraction")}}
        return {"outputs": out, "data": data}
    raise ValueError(f"convert: --from must be criteo, movielens or movielens_sequences, got {kind!r}")
