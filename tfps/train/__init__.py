"""Optimizers: dense variables as tf.compat.v1.train does them; tables by fused sparse-apply ops."""
from tfps.train.adagrad import AdagradOptimizer
from tfps.train.adam import AdamOptimizer
from tfps.train.ftrl import FtrlOptimizer
from tfps.train.gradient_descent import GradientDescentOptimizer

__all__ = ["AdagradOptimizer", "AdamOptimizer", "FtrlOptimizer", "GradientDescentOptimizer"]
