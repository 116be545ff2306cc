"""Held-out evaluation of a classifier: top-1/top-3, per-class accuracy, confusion, calibration."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def classification_report(truth: np.ndarray, probs: np.ndarray, labels: list[str], bins: int = 10) -> dict:
    """Accuracies, the confusion matrix (rows: truth) and the expected calibration error of the top
    class (equal-width confidence bins) with its reliability table."""
    truth = np.asarray(truth)
    order = np.argsort(-probs, axis=1)
    top1 = order[:, 0]
    confusion = np.zeros((len(labels), len(labels)), dtype=int)
    np.add.at(confusion, (truth, top1), 1)
    confidence = probs[np.arange(len(truth)), top1]
    correct = top1 == truth
    edges = np.linspace(0, 1, bins + 1)
    which = np.clip(np.digitize(confidence, edges[1:-1]), 0, bins - 1)
    reliability = [{"bin": i, "count": int((which == i).sum()),
                    "confidence": float(confidence[which == i].mean()) if (which == i).any() else None,
                    "accuracy": float(correct[which == i].mean()) if (which == i).any() else None}
                   for i in range(bins)]
    ece = sum(r["count"] * abs(r["confidence"] - r["accuracy"]) for r in reliability if r["count"]) / len(truth)
    per_label = {label: float(correct[truth == i].mean()) for i, label in enumerate(labels) if (truth == i).any()}
    return {"n": int(len(truth)), "top1": float(correct.mean()),
            "top3": float((order[:, :3] == truth[:, None]).any(axis=1).mean()),
            "per_label_top1": per_label, "ece": float(ece), "reliability": reliability,
            "confusion": confusion.tolist()}


def plot_folder(component: Path) -> Path:
    """Where a trained component's evaluation plots go: beside its folder, not inside it (they are
    not shipped in the bundle), in a folder of their own (pushed as one to an object-store root)."""
    folder = Path(component).parent / f"{Path(component).name}.plots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def plot_confusion(confusion: list[list[int]], labels: list[str], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = np.asarray(confusion, dtype=float)
    share = m / np.maximum(m.sum(axis=1, keepdims=True), 1)
    fig, ax = plt.subplots(figsize=(1.0 + 0.5 * len(labels), 0.8 + 0.5 * len(labels)))
    ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    for i in range(len(labels)):
        for j in range(len(labels)):
            if m[i, j]:
                ax.text(j, i, int(m[i, j]), ha="center", va="center", fontsize=7,
                        color="white" if share[i, j] > 0.5 else "black")
    ax.set(xlabel="predicted", ylabel="true", title=title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_reliability(reliability: list[dict], path: Path, title: str) -> Path:
    """Calibration of the top class: mean confidence against accuracy per confidence bin, with the
    share of predictions in each bin."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    used = [r for r in reliability if r["count"]]
    fig, (ax, bars) = plt.subplots(2, 1, figsize=(5, 6), height_ratios=[3, 1], sharex=True)
    ax.plot([0, 1], [0, 1], ":", color="gray", label="perfect calibration")
    ax.plot([r["confidence"] for r in used], [r["accuracy"] for r in used], "-o", color="tab:blue", label="model")
    ax.set(ylabel="accuracy", title=title, xlim=(0, 1), ylim=(0, 1))
    ax.legend(fontsize=8)
    width = 1.0 / len(reliability)
    bars.bar([(r["bin"] + 0.5) * width for r in reliability], [r["count"] for r in reliability], width=width * 0.9,
             color="tab:gray")
    bars.set(xlabel="top-class confidence", ylabel="predictions")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
