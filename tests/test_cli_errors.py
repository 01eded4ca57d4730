"""tfps.cli's one-line errors: the telling line of TF's multi-line messages."""
from tfps.cli import _op_error_line


def test_the_reason_of_a_remote_and_a_local_graph_error_is_found():
    remote = ("=====================\nINVALID_ARGUMENT: From /job:ps/replica:0/task:1:\n"
              "criteo: /data/day.txt line 5: has I3 = 'abc', not an integer\n\t [[{{node TfpsCheckRows}}]]\n"
              "=====================")
    assert _op_error_line(remote) == "criteo: /data/day.txt line 5: has I3 = 'abc', not an integer"
    local = ("Graph execution error:\n\nDetected at node 'save/RestoreV2' defined at (most recent call last):\n"
             "  File \"x.py\", line 1, in <module>\nNode: 'save/RestoreV2'\nKey mlp_1/bias not found in checkpoint\n"
             "\t [[{{node save/RestoreV2}}]]")
    assert _op_error_line(local) == "Key mlp_1/bias not found in checkpoint"
    assert _op_error_line("From /job:chief/replica:0/task:0:\nmovielens: r.csv line 2: bad") == \
        "movielens: r.csv line 2: bad"
