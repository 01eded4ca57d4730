"""bench_scaling's figure: tfps's lookup and Adagrad rates against DenseHashTable's and a
tf.Variable's by table size, per dim and id distribution (docs/scaling.png)."""
import os

from common import pyplot

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def plot(results, path):
    plt = pyplot(path)
    if plt is None:
        return
    dims = sorted({r["dim"] for r in results})
    fig, axes = plt.subplots(len(dims), 2, figsize=(10, 3.4 * len(dims)), dpi=110, squeeze=False)
    for row, dim in enumerate(dims):
        cells = sorted((r for r in results if r["dim"] == dim), key=lambda r: r["n"])
        ns = [r["n"] for r in cells]
        for col, dist in enumerate(("uniform", "zipf")):
            ax = axes[row][col]
            for label, get, style in (
                    ("tfps lookup", lambda r: r["tfps"][f"lookup_{dist}"], "o-"),
                    ("DenseHashTable lookup", lambda r: r.get("dht", {}).get(f"lookup_{dist}"), "s--"),
                    ("tfps Adagrad", lambda r: r["tfps"][f"adagrad_{dist}"], "o-"),
                    ("Variable Adagrad (TF)", lambda r: r.get("variable", {}).get(f"adagrad_{dist}"), "s--")):
                have = [(x, get(r)) for x, r in zip(ns, cells) if get(r)]
                ax.plot([x for x, _ in have], [y / 1e6 for _, y in have], style, label=label)
            ax.set_xscale("log")
            ax.set_xlabel("keys in the table")
            ax.set_ylabel("M ids (rows) / s")
            ax.set_title(f"dim {dim}, {dist} ids, 2 threads")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path)
    print(f"throughput vs table size drawn to {os.path.relpath(path, ROOT)}")
