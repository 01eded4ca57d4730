"""A small model trained and exported on tfps.runner (no tf.estimator), for the serving tests of
Classify / Regress and of the server's controls: the demo model at step 20, then at step 40."""
import numpy as np

from tfps.config import load_config
from tfps.data.sources import eval_set, make_source
from tfps.models.zoo import model_fn
from tfps.runner.job import export, params_of, settings_of
from tfps.runner.training import train

SETS = ["train.batch_size=128", "model.hidden_units=[16]", "data.vocab_max=3000"]


def runner_cfg(model_dir):
    return load_config("configs/demo.yaml", SETS + [f"model_dir={model_dir}"])


def train_to(cfg, steps):
    source = make_source(cfg)
    train(model_fn, params_of(cfg), source.train_input_fn(cfg.train.batch_size), settings_of(cfg), max_steps=steps,
          printer=lambda *a, **k: None)


def runner_models(root):
    """{"rows": 48 rows (the first 8 with ids never seen), "exports": {20: path, 40: path}}."""
    cfg = runner_cfg(root / "model")
    exports = {}
    for steps in (20, 40):
        train_to(cfg, steps)
        exports[steps] = export(cfg, str(root / f"export{steps}"))
    features, _, _ = eval_set(make_source(cfg).gen, 48, 48)
    rows = {k: v.copy() for k, v in features.items()}
    rows["ids"][:8] = np.arange(8 * 26).reshape(8, 26) + 2**45
    return {"cfg": cfg, "rows": rows, "exports": exports}
