"""The TorchRec side of benchmarks/bench_torchrec.py: the demo's DeepFM trained on CPU in eager PyTorch on
batches made in advance (the driver's .npz), then scored on its eval set. Runs in .venv-torchrec (torch,
fbgemm-gpu-cpu, torchrec: benchmarks/requirements-torchrec.txt), not in tfps's venv.

    --mode fixed  one table per field, num_embeddings = vocabulary size + 1, indexed by the id's rank in
                  its field (the driver's `ranks`): no hash probe, every row there from the start
    --mode mch    the raw 2^40 ids (`ids`) through a ManagedCollisionCollection of one
                  MCHManagedCollisionModule per field (LFU_EvictionPolicy, eviction_interval 1: profile()
                  admits a step's new ids before remap(), so an id gets its row in the step it is first
                  seen), zch_size = vocabulary size + 2 (every id of the field fits, with the slot remap()
                  sends misses to to spare), in front of the same tables

Tables: torchrec.modules.fused_embedding_modules.FusedEmbeddingBagCollection (fbgemm's
SplitTableBatchedEmbeddingBagsCodegen on the host), optimizer torch.optim.Adagrad -> fbgemm EXACT_ADAGRAD,
fused into the backward pass. One table per field, rows of 8 (FM and MLP) + 1 (first-order weight) as
tfps's, so that one lookup per id serves both, padded to 12: fbgemm's tables take only widths that are
a multiple of 4 (the 3 pad columns start at 0, get no gradient and stay 0; they are read and written
with the row all the same). 8 + a separate first-order table would be two lookups per id and that
table 4 wide for 1 value: as many floats, twice the lookups.
Matching tfps (tfps/models/deepfm.py, tfps/train/adagrad.py): rows truncated normal stddev 0.02 (cut at 2
stddev, as TF's), dense layers glorot-uniform with zero biases, Adagrad accumulators starting at 0.1
(fbgemm's start at 0: set after construction), the same learning rate for tables and dense part (dense:
torch.optim.Adagrad), mean sigmoid cross-entropy, dense features as log1p(max(x, 0)).

    logit = sum_f w_f + <a, log1p(dense)> + b + FM(v) + MLP([v_1 .. v_26, log1p(dense)])

Timing: time.perf_counter and time.process_time (this process: every thread) around steps
warmup..steps. Prints one JSON line; with --scores the eval set's scores go to that .npy (the driver
computes AUC with tfps.data.synthetic.auc, as for tfps), else AUC is computed here the same way.
"""
import argparse
import json
import time

import numpy as np
import torch
from torch import nn
from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType
from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection
from torchrec.modules.mc_modules import LFU_EvictionPolicy, ManagedCollisionCollection, MCHManagedCollisionModule
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

ID_SPACE = 1 << 40   # tfps.data.synthetic.ID_BITS


def glorot(linear):
    nn.init.xavier_uniform_(linear.weight)
    nn.init.zeros_(linear.bias)
    return linear


class DeepFM(nn.Module):
    """logits [B] of DeepFM from a KeyedJaggedTensor of one id per field (keys C1..CF, F*B values,
    feature-major) and raw dense counts [B, num_dense]."""

    def __init__(self, mode, vocab_sizes, dim, num_dense, hidden_units, lr, initial_accumulator_value):
        super().__init__()
        self.num_fields, self.dim = len(vocab_sizes), dim
        rows = [int(v) + (1 if mode == "fixed" else 2) for v in vocab_sizes]
        self.width = (dim + 1 + 3) // 4 * 4   # fbgemm: a multiple of 4
        tables = [EmbeddingBagConfig(name=f"t{f}", embedding_dim=self.width, num_embeddings=rows[f],
                                     feature_names=[f"C{f + 1}"], pooling=PoolingType.SUM)
                  for f in range(self.num_fields)]
        self.ebc = FusedEmbeddingBagCollection(tables, optimizer_type=torch.optim.Adagrad,
                                               optimizer_kwargs={"lr": lr}, device=torch.device("cpu"))
        with torch.no_grad():
            for lookups in self.ebc._emb_modules:
                for weight in lookups.split_embedding_weights():
                    nn.init.trunc_normal_(weight[:, :dim + 1], std=0.02, a=-0.04, b=0.04)
                    weight[:, dim + 1:] = 0.0
                for states in lookups._emb_module.split_optimizer_states():
                    states[0].fill_(initial_accumulator_value)
        self.mcc = None
        if mode == "mch":
            self.mcc = ManagedCollisionCollection(
                {t.name: MCHManagedCollisionModule(zch_size=t.num_embeddings, device=torch.device("cpu"),
                                                   eviction_policy=LFU_EvictionPolicy(), eviction_interval=1,
                                                   input_hash_size=ID_SPACE, name=t.name)
                 for t in tables}, tables)
        self.dense_linear = glorot(nn.Linear(num_dense, 1))
        layers, width = [], self.num_fields * dim + num_dense
        for units in hidden_units:
            layers += [glorot(nn.Linear(width, units)), nn.ReLU()]
            width = units
        self.mlp = nn.Sequential(*layers, glorot(nn.Linear(width, 1)))

    def forward(self, kjt, dense):
        if self.mcc is not None:
            kjt = self.mcc(kjt)
        rows = self.ebc(kjt).values().view(-1, self.num_fields, self.width)   # [B, F, width]: dim, 1, pad
        v, w = rows[:, :, :self.dim], rows[:, :, self.dim]
        x = torch.log1p(dense.clamp_min(0.0))
        first_order = w.sum(1) + self.dense_linear(x).squeeze(1)
        summed = v.sum(1)
        fm = 0.5 * (summed.square() - v.square().sum(1)).sum(1)
        deep = torch.cat([v.reshape(-1, self.num_fields * self.dim), x], 1)
        return first_order + fm + self.mlp(deep).squeeze(1)


def kjt_of(keys, ids):
    """KeyedJaggedTensor of ids [B, F] (one value per field and row)."""
    values = torch.from_numpy(np.ascontiguousarray(ids.T)).reshape(-1).long()
    return KeyedJaggedTensor(keys=keys, values=values, lengths=torch.ones(values.numel(), dtype=torch.int32))


def exact_auc(labels, scores):
    """tfps.data.synthetic.auc: exact ROC AUC, ties counting one half."""
    labels = np.asarray(labels).astype(bool)
    order = np.argsort(scores, kind="mergesort")
    s = np.asarray(scores, np.float64)[order]
    starts = np.r_[0, np.flatnonzero(np.diff(s)) + 1]
    ends = np.r_[starts[1:], len(s)]
    ranks = np.empty(len(s))
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    pos, neg = labels.sum(), len(labels) - labels.sum()
    return float((ranks[labels].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="the driver's .npz")
    parser.add_argument("--mode", choices=("fixed", "mch"), required=True)
    parser.add_argument("--warmup", type=int, default=100, help="steps before the measured window")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--eval-batch", type=int, default=4096)
    parser.add_argument("--scores", help="write the eval set's scores (float32 .npy) here")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    d = np.load(args.data)
    key = "ranks" if args.mode == "fixed" else "ids"
    vocab = d["vocab_sizes"]
    model = DeepFM(args.mode, vocab, int(d["embedding_dim"]), d["dense"].shape[-1], [int(u) for u in d["hidden_units"]],
                   float(d["lr"]), float(d["initial_accumulator_value"]))
    dense_params = [p for n, p in model.named_parameters() if not n.startswith("ebc.")]
    optimizer = torch.optim.Adagrad(dense_params, lr=float(d["lr"]),
                                    initial_accumulator_value=float(d["initial_accumulator_value"]))
    keys = [f"C{f + 1}" for f in range(len(vocab))]
    # batches made in advance: the KJTs, dense and labels of every step
    batches = [(kjt_of(keys, ids), torch.from_numpy(dense), torch.from_numpy(labels))
               for ids, dense, labels in zip(d[key], d["dense"], d["labels"])]
    steps = len(batches)
    if not 0 < args.warmup < steps:
        raise SystemExit(f"--warmup {args.warmup}: must be in (0, {steps})")
    loss_fn = nn.BCEWithLogitsLoss()
    model.train()
    t0 = c0 = None
    for i, (kjt, dense, labels) in enumerate(batches):
        if i == args.warmup:
            t0, c0 = time.perf_counter(), time.process_time()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(kjt, dense), labels)
        loss.backward()   # the tables' rows are updated here (fused EXACT_ADAGRAD)
        optimizer.step()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    examples = (steps - args.warmup) * len(d["labels"][0])
    model.eval()
    scores = []
    with torch.no_grad():
        for i in range(0, len(d["eval_labels"]), args.eval_batch):
            kjt = kjt_of(keys, d[f"eval_{key}"][i:i + args.eval_batch])
            scores.append(torch.sigmoid(model(kjt, torch.from_numpy(d["eval_dense"][i:i + args.eval_batch]))).numpy())
    scores = np.concatenate(scores).astype(np.float32)
    if args.scores:
        np.save(args.scores, scores)
    print(json.dumps({"mode": args.mode, "steps": steps, "window_steps": steps - args.warmup, "examples": examples,
                      "seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3),
                      "examples_per_sec": round(examples / seconds, 1),
                      "cpu_ms_per_1k_examples": round(cpu * 1e6 / examples, 2),
                      "final_loss": round(loss.item(), 5), "threads": torch.get_num_threads(),
                      "auc": round(exact_auc(d["eval_labels"], scores), 4), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
