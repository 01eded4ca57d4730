"""Token-budget batching: variable-size batches whose token count stays under a budget, so that
every step costs about the same however long the examples' sequences are.

    ds = tfps.data.balance_by_tokens(examples, max_tokens=8192,
                                     length_fn=lambda x: tf.size(x["history"]) + tf.size(x["candidates"]))

Examples go to buckets by their length (bounds 1.25x apart up to max_tokens); a bucket whose
longest example has L tokens batches max_tokens // L of them, so a batch never holds
more than max_tokens tokens. Examples of about the same length share a batch, so padding them to
the batch's longest wastes little. At the end of the input each bucket's partial batch comes out:
no example is dropped, and each comes once per pass. An example longer than max_tokens is an
error naming its length.
"""
import tensorflow as tf


def token_bounds(max_tokens, growth=1.25):
    """The bucket bounds for max_tokens: 2, then each about `growth` times the one before, up to
    max_tokens + 1 (bucket i holds lengths in [bounds[i-1], bounds[i]), bucket 0 lengths 0 and
    1). A bucket's lengths differ by at most that factor, and so do its batches' token counts."""
    bounds, b = [], 2
    while b <= max_tokens:
        bounds.append(b)
        b = max(b + 1, int(b * growth))
    return bounds + [max_tokens + 1]


def balance_by_tokens(dataset, max_tokens, length_fn=None, max_batch_size=None, padding_values=None):
    """Batches of unbatched examples, at most max_tokens tokens each.

    Args:
      dataset: a tf.data.Dataset of single examples (tensors or dicts of tensors; sequence
        features of any length, padded within a batch to its longest).
      max_tokens: the budget: the lengths (length_fn) of a batch's examples sum to at most this.
      length_fn: example -> int scalar tensor, its token count. None: the sum of the leading
        dimensions of its components of rank >= 1 (scalars count 0).
      max_batch_size: also at most this many examples per batch (short examples), or None.
      padding_values: as tf.data.Dataset.padded_batch (default 0 / "").

    Returns:
      a tf.data.Dataset of padded batches (leading dimension the batch size, which varies).
    Example: max_tokens 8 and lengths 1, 7, 3, 3, 2 give batches like [7], [3, 3], [2], [1].
    """
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise ValueError(f"balance_by_tokens: max_tokens must be an int >= 1, got {max_tokens!r}")
    if max_batch_size is not None and (not isinstance(max_batch_size, int) or max_batch_size < 1):
        raise ValueError(f"balance_by_tokens: max_batch_size must be None or an int >= 1, got {max_batch_size!r}")
    length_fn = length_fn or _leading_dims

    def checked(*example):
        example = example[0] if len(example) == 1 else example
        n = tf.cast(length_fn(example), tf.int32)
        check = tf.debugging.assert_less_equal(
            n, max_tokens, message=f"balance_by_tokens: an example is longer than max_tokens = {max_tokens}")
        with tf.control_dependencies([check]):
            return tf.identity(n)

    bounds = token_bounds(max_tokens)
    # bucket i < len(bounds) holds lengths below bounds[i]; the last one (longer than the
    # budget) never gets an example past the check
    sizes = [max(1, max_tokens // max(1, b - 1)) for b in bounds] + [1]
    if max_batch_size is not None:
        sizes = [min(s, max_batch_size) for s in sizes]
    return dataset.bucket_by_sequence_length(checked, bounds, sizes, padding_values=padding_values)


def _leading_dims(example):
    parts = [tf.shape(t)[0] for t in tf.nest.flatten(example) if t.shape.rank is None or t.shape.rank >= 1]
    return tf.add_n(parts) if parts else tf.constant(0, tf.int32)
