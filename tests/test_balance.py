"""tfps.data.balance_by_tokens: batches under a token budget, every example once per pass.

Oracle: each example carries its id and its true length; the batches are checked against them."""
import numpy as np
import pytest
import tensorflow as tf

from tfps.data.balance import balance_by_tokens, token_bounds

MAX_TOKENS = 2048


def _examples(n, seed=0):
    rng = np.random.default_rng(seed)
    # long-tailed lengths (log-normal, up to 1024), split between a history and candidates
    lengths = np.minimum(np.exp(rng.normal(4.0, 1.2, n)).astype(np.int64) + 1, 1024)
    history = [int(rng.integers(0, l + 1)) for l in lengths]
    return [{"id": np.int64(i), "history": rng.integers(1, 100, h).astype(np.int64),
             "candidates": rng.integers(1, 100, l - h).astype(np.int64)} for i, (l, h) in enumerate(zip(lengths, history))]


def _dataset(examples):
    def gen():
        yield from examples
    sig = {"id": tf.TensorSpec([], tf.int64), "history": tf.TensorSpec([None], tf.int64),
           "candidates": tf.TensorSpec([None], tf.int64)}
    return tf.data.Dataset.from_generator(gen, output_signature=sig)


def _batches(ds):
    """Every batch of one pass (graph mode)."""
    with tf.Graph().as_default():
        nxt = tf.compat.v1.data.make_one_shot_iterator(ds()).get_next()
        out = []
        with tf.compat.v1.Session() as s:
            while True:
                try:
                    out.append(s.run(nxt))
                except tf.errors.OutOfRangeError:
                    return out


def _length(x):
    return tf.size(x["history"]) + tf.size(x["candidates"])


@pytest.mark.parametrize("max_batch_size", [None, 16])
def test_batches_stay_under_the_budget_and_hold_every_example_once(max_batch_size):
    examples = _examples(1500)
    length = {int(x["id"]): len(x["history"]) + len(x["candidates"]) for x in examples}
    seen, sizes = [], []
    for batch in _batches(lambda: balance_by_tokens(_dataset(examples), MAX_TOKENS, _length,
                                                    max_batch_size=max_batch_size)):
        ids = batch["id"].tolist()
        assert sum(length[i] for i in ids) <= MAX_TOKENS
        if max_batch_size:
            assert len(ids) <= max_batch_size
        # padded to the batch's longest of each feature, the rows hold their own values first
        for row, i in enumerate(ids):
            h = examples[i]["history"]
            np.testing.assert_array_equal(batch["history"][row, :len(h)], h)
        seen += ids
        sizes.append(len(ids))
    assert sorted(seen) == list(range(len(examples)))      # nothing dropped, nothing twice
    assert len(set(sizes)) > 3                             # sizes follow the lengths


def test_the_default_length_counts_every_sequence_feature():
    examples = _examples(200, seed=1)
    length = {int(x["id"]): len(x["history"]) + len(x["candidates"]) for x in examples}
    batches = _batches(lambda: balance_by_tokens(_dataset(examples), 1100))
    for batch in batches:
        assert sum(length[i] for i in batch["id"].tolist()) <= 1100
    assert sorted(i for b in batches for i in b["id"].tolist()) == list(range(len(examples)))


def test_an_example_longer_than_the_budget_is_an_error_naming_it():
    examples = _examples(10)
    examples[3]["candidates"] = np.arange(600, dtype=np.int64)
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer than max_tokens = 512"):
        _batches(lambda: balance_by_tokens(_dataset(examples), 512, _length))


def test_bad_arguments():
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="max_tokens must be an int >= 1"):
            balance_by_tokens(_dataset(_examples(2)), 0)
        with pytest.raises(ValueError, match="max_batch_size"):
            balance_by_tokens(_dataset(_examples(2)), 8, max_batch_size=0)
    assert token_bounds(8) == [2, 3, 4, 5, 6, 7, 8, 9]
    assert token_bounds(100, growth=2.0) == [2, 4, 8, 16, 32, 64, 101]
