"""What every model_fn shares with the runners."""

# The training loss (a float32 scalar) a model_fn adds here, for the runners' progress hooks.
LOSS_COLLECTION = "tfps_training_loss"
