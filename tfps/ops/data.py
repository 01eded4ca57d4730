"""Wrapper of TfpsCheckRows (kernels/data_kernels.cc), the readers' malformed-row error."""
import tensorflow as tf

from tfps.ops._loader import load

tf.no_gradient("TfpsCheckRows")


SKIP_HINT = "data.skip_bad_rows: true (tfps convert --skip-bad-rows) skips and counts such rows"


def check_rows(ok, files, lines, reasons, reader, hint=SKIP_HINT, name=None):
    """ok bool [B], files string [B], lines int64 [B], reasons string [B] -> bool scalar (true);
    InvalidArgumentError "READER: FILE line N: REASON (HINT)" for the first row that is not ok."""
    return load().tfps_check_rows(ok, files, lines, reasons, reader=reader, hint=hint, name=name)
