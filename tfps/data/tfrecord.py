"""TFRecords of tf.train.Example: the reader (a feature spec says what each feature is) and the
writer behind `tfps convert`.

A spec is a list of FeatureSpec (tfps.config) or dicts {name, type, length=1, names=None}:
  float     FixedLen [length] float  -> columns of features["dense"]
  int       FixedLen [length] int64  -> columns of features["ids"], named names or NAME_i (NAME when length 1)
  string    FixedLen [length] bytes  -> hashed to int64 ids, then as int
  int_list  VarLen int64             -> features[NAME] int64 [B, L] padded with -1 (a list feature)
plus the label (float, FixedLen [1]) and optionally the user id (int, FixedLen [1]; not a model input).
Files are read in sorted order; a batch is parsed at once (tf.io.parse_example). A file that ends
early (cut mid-record or mid-header) or holds a corrupt record is an InvalidArgumentError naming
it and saying "truncated" (record_batches), after the records before that point.
"""
import os

import tensorflow as tf
import yaml

from tfps.data.file_source import DataMissing, absent
from tfps.data.schema import PAD_ID, Schema, graph_code, numpy_batches, share
from tfps.ops.data import check_rows

SPEC_FILE = "tfps_features.yaml"   # tfps convert writes the data section of the files it writes here


def _field(spec, key, default=None):
    return spec.get(key, default) if isinstance(spec, dict) else getattr(spec, key, default)


def _names(spec):
    name, length, names = _field(spec, "name"), _field(spec, "length", 1), _field(spec, "names")
    return list(names) if names else ([name] if length == 1 else [f"{name}_{i}" for i in range(length)])


def check_first_record(path, specs, label="label", user=None):
    """ValueError naming the file and feature when the first record of `path` lacks a feature of
    the spec or holds it as another kind (a typo in data.features would otherwise read as empty
    lists or fail later without the file's name)."""
    try:
        first = next(iter(tf.compat.v1.io.tf_record_iterator(path)), None)
    except tf.errors.OpError as e:
        raise ValueError(f"tfrecord: cannot read {path}: {e.message.strip().splitlines()[0]}") from None
    if first is None:
        return
    example = tf.train.Example.FromString(first).features.feature
    kinds = {"float": "float_list", "int": "int64_list", "int_list": "int64_list", "string": "bytes_list"}
    wanted = [(_field(s, "name"), kinds[_field(s, "type")]) for s in specs] + [(label, "float_list")]
    wanted += [(user, "int64_list")] if user else []
    for name, kind in wanted:
        if name not in example:
            raise ValueError(f"tfrecord: {path}: the first record has no feature {name!r} (it has "
                             f"{', '.join(sorted(example))})")
        if example[name].WhichOneof("kind") != kind:
            raise ValueError(f"tfrecord: {path}: feature {name!r} is a {example[name].WhichOneof('kind')}, the spec "
                             f"reads a {kind}")


def schema_of(specs, user=None):
    """The Schema of batches read with these specs (ValueError without an int or string feature:
    a model needs ids)."""
    dense = sum(_field(s, "length", 1) for s in specs if _field(s, "type") == "float")
    ids = [n for s in specs if _field(s, "type") in ("int", "string") for n in _names(s)]
    lists = [_field(s, "name") for s in specs if _field(s, "type") == "int_list"]
    if not ids:
        raise ValueError("data.features: no int or string feature; the models need at least one id feature")
    return Schema(num_dense=dense, id_features=tuple(ids), list_features=tuple(lists), has_users=user is not None)


def _description(specs):
    """parse_example's description of the features of `specs` (no label, no user)."""
    kinds = {"float": tf.float32, "int": tf.int64, "string": tf.string}
    return {_field(s, "name"): (tf.io.VarLenFeature(tf.int64) if _field(s, "type") == "int_list"
                                else tf.io.FixedLenFeature([_field(s, "length", 1)], kinds[_field(s, "type")]))
            for s in specs}


def _features(ex, specs, b):
    dense = [ex[_field(s, "name")] for s in specs if _field(s, "type") == "float"]
    ids = [ex[_field(s, "name")] if _field(s, "type") == "int"
           else tf.strings.to_hash_bucket_fast(ex[_field(s, "name")], 2**63 - 1)
           for s in specs if _field(s, "type") in ("int", "string")]
    features = {"dense": tf.concat(dense, 1) if dense else tf.zeros([b, 0]),
                "ids": tf.concat(ids, 1) if ids else tf.zeros([b, 0], tf.int64)}
    for s in specs:
        if _field(s, "type") == "int_list":
            features[_field(s, "name")] = tf.sparse.to_dense(ex[_field(s, "name")], default_value=PAD_ID)
    return features


def example_features(serialized, specs):
    """The model inputs of serialized tf.train.Examples, as the reader makes them (no label, no
    user): what a serving signature over Examples feeds the model (tfps.runner.export).

    serialized: string [B] -> {"dense": float32 [B, num_dense], "ids": int64 [B, F],
    list feature: int64 [B, L] (-1 pads)}."""
    return _features(tf.io.parse_example(serialized, _description(specs)), specs, tf.shape(serialized)[0])


def _parser(specs, label, user):
    description = {label: tf.io.FixedLenFeature([], tf.float32), **_description(specs)}
    if user:
        description[user] = tf.io.FixedLenFeature([], tf.int64)

    def parse(serialized, path, first):
        ex = tf.io.parse_example(serialized, description)
        features = _features(ex, specs, tf.shape(serialized)[0])
        if user:
            features["user"] = ex[user]
        # A NaN or infinite float would only show as a NaN loss, naming no file: a bad record here.
        finite = tf.reduce_all(tf.math.is_finite(features["dense"]), 1) & tf.math.is_finite(ex[label])
        number = first + tf.range(tf.size(finite, out_type=tf.int64)) + 1
        check = check_rows(finite, tf.fill(tf.shape(finite), path), number,
                           tf.fill(tf.shape(finite), "(its record number) has a float feature or label that is NaN "
                                                     "or infinite"),
                           reader="tfrecord", hint="fix or drop that record")
        with tf.control_dependencies([check]):
            return features, tf.identity(ex[label])
    return parse


def files_of(path, what="data.path"):
    """Sorted TFRecord files of a directory (its *.tfrecord*), a glob or one file; DataMissing
    naming `what` (the config key) and path if none."""
    if tf.io.gfile.isdir(path):
        files = sorted(tf.io.gfile.glob(os.path.join(path, "*.tfrecord*")))
        if not files:
            raise DataMissing(what, path, "is a directory without *.tfrecord* files")
        return files
    files = sorted(tf.io.gfile.glob(path))
    if not files:
        raise absent(what, path)
    return files


def read_spec(path):
    """The data section tfps convert wrote next to its files (DIR/tfps_features.yaml), or None."""
    directory = path if tf.io.gfile.isdir(path) else os.path.dirname(path)
    spec_file = os.path.join(directory, SPEC_FILE)
    if not tf.io.gfile.exists(spec_file):
        return None
    with tf.io.gfile.GFile(spec_file) as f:
        return yaml.safe_load(f)


RECORD_OVERHEAD = 16   # bytes around each record of a TFRecord file: length (8), its CRC (4), the data's CRC (4)


def record_batches(path, batch_size):
    """Batches string [b] of the raw records of one TFRecord file, read to its end.

    A file that ends early -- cut mid-record, or mid-header, which TF's TFRecordDataset reads as
    a whole shorter file without a word -- or holds a corrupt record (TF: a DataLossError that
    does not name the file) is an InvalidArgumentError naming the file, saying "truncated" and
    where: the records are counted in bytes (each takes its length + RECORD_OVERHEAD) and must
    end where the file ends (its size when the dataset is built). The records before that point
    have been read by then (TF's own message is logged as a warning). The check costs nothing
    measurable: CPU a record within the noise of TFRecordDataset.batch alone (1.49 and 1.73 us,
    the least of 4 runs each on 2 shared cores)."""
    path = str(path)
    size = tf.io.gfile.stat(path).length
    records = tf.data.TFRecordDataset(path).ignore_errors(log_warning=True).batch(batch_size)
    end = tf.data.Dataset.from_tensors((tf.constant([], tf.string), True))
    marked = records.map(lambda batch: (batch, False)).concatenate(end)

    def count(read, item):   # (bytes read, records read) so far; at the end, they must be the file's
        batch, last = item
        read = (read[0] + tf.reduce_sum(tf.cast(tf.strings.length(batch), tf.int64)) +
                RECORD_OVERHEAD * tf.size(batch, out_type=tf.int64), read[1] + tf.size(batch, out_type=tf.int64))
        message = tf.strings.join([
            f"tfrecord: {path}: truncated or corrupt after record ", tf.strings.as_string(read[1]), " (byte ",
            tf.strings.as_string(read[0]), f" of {size}): the file ends early or its next record is damaged"])
        whole = tf.debugging.Assert(tf.logical_or(tf.logical_not(last), tf.equal(read[0], size)), [message])
        with tf.control_dependencies([whole]):
            return read, (tf.identity(batch), last)
    counted = marked.scan((tf.constant(0, tf.int64), tf.constant(0, tf.int64)), count)
    return counted.filter(lambda batch, last: tf.logical_not(last)).map(lambda batch, last: batch)


@graph_code
def tfrecord_batches(files, batch_size, specs, label="label", user=None):
    """Unparsed record batches (serialized [b], file, records before them in the file) of the
    files in order (a batch ends at a file's end; a file that ends early is an error naming it:
    record_batches), and the parse function of such a batch -> (features, labels), which fails
    naming the file and record of a NaN or infinite float."""
    ds = None
    for path in files:   # (records, file, number of the first record - 1): a bad record is named
        batches = record_batches(path, batch_size).enumerate().map(
            lambda i, b, path=str(path): (b, tf.constant(path), i * batch_size))
        ds = batches if ds is None else ds.concatenate(batches)
    return ds, _parser(specs, label, user)


@graph_code
def tfrecord_dataset(paths, batch_size, specs, label="label", user=None, repeat=False, start=0, shard_index=0,
                     num_shards=1):
    """Batches (features, labels) of tf.train.Example files (see the module docstring); a
    trainer's share as tfps.data.schema.share says."""
    ds, parse = tfrecord_batches(paths, batch_size, specs, label, user)
    ds = share(ds.repeat() if repeat else ds, start, shard_index, num_shards)
    return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def specs_for(schema):
    """The feature specs (as dicts) of batches with this schema, as tfps convert writes them."""
    specs = []
    if schema.num_dense:
        specs.append({"name": "dense", "type": "float", "length": schema.num_dense})
    specs.append({"name": "ids", "type": "int", "length": len(schema.id_features),
                  "names": list(schema.id_features)})
    specs += [{"name": n, "type": "int_list"} for n in schema.list_features]
    return specs


def _example(features, label, i, schema):
    f = {"label": tf.train.Feature(float_list=tf.train.FloatList(value=[label[i]])),
         "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=features["ids"][i]))}
    if schema.num_dense:
        f["dense"] = tf.train.Feature(float_list=tf.train.FloatList(value=features["dense"][i]))
    for name in schema.list_features:
        row = features[name][i]
        f[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=row[row != PAD_ID]))
    if schema.has_users:
        f["user"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[features["user"][i]]))
    return tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString()


def write_tfrecords(make_dataset, schema, out_dir, rows_per_file=1_000_000, printer=print):
    """Writes the batches of a finite tfps dataset (make_dataset() builds it) as tf.train.Example
    files out_dir/part-NNNNN.tfrecord. Returns (rows written, bad rows the reader skipped, files)."""
    tf.io.gfile.makedirs(out_dir)
    rows = bad = 0
    files, writer = [], None
    for features, labels in numpy_batches(make_dataset):
        bad += int(features.get("bad_rows", 0))
        for i in range(len(labels)):
            if writer is None or rows % rows_per_file == 0 and rows:
                if writer is not None:
                    writer.close()
                files.append(os.path.join(out_dir, f"part-{len(files):05d}.tfrecord"))
                writer = tf.io.TFRecordWriter(files[-1])
            writer.write(_example(features, labels, i, schema))
            rows += 1
        if rows // 100_000 > (rows - len(labels)) // 100_000:
            printer(f"{out_dir}: {rows} rows written", flush=True)
    if writer is not None:
        writer.close()
    return rows, bad, files


def data_section(schema, path, eval_path=None):
    """The config's data section that reads files written by write_tfrecords."""
    section = {"format": "tfrecord", "path": path, "features": specs_for(schema), "label": "label"}
    if eval_path:
        section["eval_path"] = eval_path
    if schema.has_users:
        section["user"] = "user"
    return section


__all__ = ["SPEC_FILE", "data_section", "example_features", "files_of", "read_spec", "record_batches", "schema_of",
           "specs_for", "tfrecord_dataset", "write_tfrecords"]
