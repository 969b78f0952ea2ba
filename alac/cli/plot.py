"""The loss curves of a run (`alac train --plot`): train and validation loss against epoch and wall time."""

from __future__ import annotations


def plot_history(history, path, title):
    """Train and validation loss against epoch and against training wall time: one curve per split
    (saved to path when given; the figure is returned)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [r["epoch"] for r in history]
    wall, total = [], 0.0
    for record in history:
        total += record["seconds"]
        wall.append(total)
    curves = [k for k in ("valid_logloss", "valid_rmse", "test_logloss", "test_rmse") if history and k in history[0]]
    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for axis, x, label in ((axes[0], epochs, "epoch"), (axes[1], wall, "training wall time (s)")):
        axis.plot(x, [r["train_loss"] for r in history], marker="o", label="train loss (running, per epoch)")
        for key in curves:
            split, metric = key.split("_", 1)
            axis.plot(x, [r[key] for r in history], marker="s",
                      label=f"{'validation' if split == 'valid' else 'test'} {metric}")
        axis.set_xlabel(label)
        axis.set_ylabel("loss")
        axis.grid(alpha=0.3)
        axis.legend()
    figure.suptitle(title)
    figure.tight_layout()
    if path is not None:
        figure.savefig(path, dpi=110)
    plt.close(figure)
    return figure
