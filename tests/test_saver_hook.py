"""tfps.estimator.CheckpointSaverHook against tf.compat.v1.train.CheckpointSaverHook: the same
checkpoints, without a session.run of its own on the steps where no save is due."""
import tensorflow as tf

from tfps.estimator import CheckpointSaverHook


def _train(model_dir, hook_class, steps, every_steps=None, every_secs=None):
    """Trains a counter `steps` steps under MonitoredSession with the given saver hook class;
    returns (the checkpoint steps written, how many times the hook ran a read of the global step)."""
    graph = tf.Graph()
    extra = []
    with graph.as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        w = tf.compat.v1.get_variable("w", [], initializer=tf.zeros_initializer())
        # As tf.estimator builds it: the step's train op runs after the read its hooks fetch.
        from tensorflow.python.training import training_util
        with tf.control_dependencies([training_util._get_or_create_global_step_read()]):
            train_op = tf.group(w.assign_add(1.0), tf.compat.v1.assign_add(step, 1))
        saver = tf.compat.v1.train.Saver(max_to_keep=100)
        scaffold = tf.compat.v1.train.Scaffold(saver=saver)
        hook = hook_class(model_dir, save_steps=every_steps, save_secs=every_secs, scaffold=scaffold)
        original = hook.after_run

        def after_run(run_context, run_values):
            session = run_context.session
            run = session.run

            def counted(*args, **kwargs):
                fetches = args[0] if args else kwargs.get("fetches")
                extra.append(fetches is hook._global_step_tensor)   # saves run the saver's ops too
                return run(*args, **kwargs)
            session.run = counted
            try:
                return original(run_context, run_values)
            finally:
                session.run = run
        hook.after_run = after_run
        creator = tf.compat.v1.train.ChiefSessionCreator(scaffold=scaffold)
        with tf.compat.v1.train.MonitoredSession(session_creator=creator, hooks=[hook]) as sess:
            for _ in range(steps):
                sess.run(train_op)
    state = tf.train.get_checkpoint_state(model_dir)
    saved = sorted(int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths)
    return saved, sum(extra)


def test_saves_the_steps_tf_saves_without_a_run_per_step(tmp_path):
    want, tf_runs = _train(str(tmp_path / "tf"), tf.compat.v1.train.CheckpointSaverHook, 23, every_steps=5)
    got, our_runs = _train(str(tmp_path / "tfps"), CheckpointSaverHook, 23, every_steps=5)
    assert got == want and want == [0, 5, 10, 15, 20, 23]
    assert tf_runs >= 23            # TF's hook reads the global step after every step
    assert our_runs == 4            # ours only when a save is due (steps 5, 10, 15, 20)


def test_time_based_saves_still_happen(tmp_path):
    got, _ = _train(str(tmp_path / "secs"), CheckpointSaverHook, 3, every_secs=3600)
    assert got == [0, 3]            # the first session's and the end's
