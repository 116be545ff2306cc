"""Export the PyTorch sentence encoder to the bundle's ONNX `sentence_encoder` component.

The runtime (`routeforge.artifacts.deciding.sentence_encoder`) must embed prompts exactly as training did,
without PyTorch. The graph holds the whole sentence-transformers stack (transformer, the pooling its
`1_Pooling` config names, L2 normalisation), so a runtime in any language runs one graph; the
tokenizer ships as `tokenizer.json`. Float32 weights: the embeddings match the PyTorch encoder's to
about 1e-7 in cosine (the component's `parity/min_cosine` metric, measured here on probe prompts
with both truncation sides), which keeps the router's choices the same.

An export is reused while its folder's `encoder.json` names the same encoder and the graph verifies,
so a retrain does not rewrite (and re-version) an unchanged encoder. A new folder (a new fleet's
storage root, a fresh state folder) copies the machine's shared export of the same encoder, made with
the same libraries and this module's same code (`shared_export`: a trace, an export and a parity
check each time was most of a small fleet's training stage), exporting only where none verifies.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from routeforge.artifacts.bundle.writer import ComponentSource, sha256_file
from routeforge.artifacts.deciding.sentence_encoder import ENCODER_GRAPH, ENCODER_SPEC, SentenceEncoder
from routeforge.core.pretrained import resolve_pretrained
from routeforge.training import torch_encoder

POOLING_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}
PROBES = ("What is 15 plus 27?", "Translate to French: good morning, how are you today?",
          "Write a Python function that returns the n-th Fibonacci number. " * 40, "", "Ünïcödé ✓ 数学")


def _pooling(model) -> str:
    config = model[1].get_config_dict() if len(model) > 1 else {}
    if isinstance(config.get("pooling_mode"), str):  # sentence-transformers >= 5 names the mode
        config = {f"pooling_mode_{config['pooling_mode']}{'_token' if config['pooling_mode'] == 'cls' else '_tokens'}":
                  True}
    modes = [name for key, name in POOLING_MODES.items() if config.get(key)]
    others = [k for k, v in config.items() if k.startswith("pooling_mode") and v and k not in POOLING_MODES]
    if len(modes) != 1 or others:
        raise ValueError(f"encoder pooling {config} is not supported (mean or cls, one of them)")
    return modes[0]


def _export_graph(model, path: Path, pooling: str) -> None:
    import torch

    class Embed(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            hidden = self.inner(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            if pooling == "cls":
                pooled = hidden[:, 0]
            else:
                mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    ids = torch.randint(100, 1000, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.int64)
    mask[1, 6:] = 0
    torch.onnx.export(Embed(model[0].auto_model).eval(), (ids, mask), str(path),
                      input_names=["input_ids", "attention_mask"], output_names=["embedding"], opset_version=17,
                      dynamo=False, dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
                                                  "attention_mask": {0: "batch", 1: "sequence"},
                                                  "embedding": {0: "batch"}})


def parity(folder: Path, ref: str, texts: Sequence[str] = PROBES) -> dict[str, float]:
    """Smallest cosine between the ONNX and PyTorch embeddings of `texts`, both truncation sides."""
    runtime = SentenceEncoder.load(folder)
    worst = 1.0
    for side in ("right", "left"):
        a, b = runtime.encode(list(texts), side), torch_encoder.encode(list(texts), ref, truncation_side=side)
        worst = min(worst, float(np.min(np.sum(a * b, axis=1))))
    return {"parity/min_cosine": worst}


SHARED_CACHE_ENV = "ROUTEFORGE_ENCODER_CACHE"  # where `shared_export` keeps exports (default: the state folder's)


def _verified(ref: str, folder: Path) -> dict | None:
    """The folder's spec where it holds a whole, verifying export of `ref` (a spec without its parity was
    left by a run killed while measuring it), else None."""
    spec_path, graph = folder / ENCODER_SPEC, folder / ENCODER_GRAPH
    if not spec_path.is_file():
        return None
    try:
        spec = json.loads(spec_path.read_text())
    except (OSError, ValueError):
        return None
    whole = spec.get("ref") == ref and "parity" in spec and graph.is_file()
    return spec if whole and spec.get("graph_sha256") == sha256_file(graph) else None


def export_key(ref: str) -> str:
    """What decides an export's bytes: the encoder (its reference, and a local folder's file sizes and
    times), the libraries that trace and write the graph, and this module's source."""
    import hashlib
    from importlib.metadata import version


    parts = [ref, Path(__file__).read_text()]
    parts += [f"{name}=={version(name)}" for name in ("torch", "transformers", "sentence-transformers", "onnx")]
    local = Path(resolve_pretrained(ref))
    if local.is_dir():
        parts += sorted(f"{p.relative_to(local)}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
                        for p in local.rglob("*") if p.is_file())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def shared_export(ref: str) -> Path:
    """The machine's export of encoder `ref` ($ROUTEFORGE_ENCODER_CACHE, else `exports/` of
    `torch_encoder.encoder_cache_root()`: $ROUTEFORGE_STATE/encoders where that is set, else
    ~/.cache/routeforge/encoders), made under a file lock the first time and kept while it verifies."""
    from filelock import FileLock

    root = Path(os.environ.get(SHARED_CACHE_ENV) or torch_encoder.encoder_cache_root() / "exports")
    folder = root / export_key(ref)
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock", timeout=600):
        if _verified(ref, folder) is None:
            _export(ref, folder)
    return folder


def _emptied(folder: Path) -> Path:
    """`folder`, created, without the files an earlier export left in it."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        if old.is_file():
            old.unlink()
    return folder


def export_sentence_encoder(ref: str, folder: Path) -> ComponentSource:
    """The `sentence_encoder` component for encoder `ref` in `folder`: reused where it verifies, else
    copied from the machine's shared export (`shared_export`), else exported here."""
    folder = Path(folder)
    spec = _verified(ref, folder)
    if spec is None:
        source = shared_export(ref)
        _emptied(folder)
        for file in sorted(source.iterdir(), key=lambda p: p.name == ENCODER_SPEC):  # the spec last: whole or not
            if file.is_file() and not file.name.endswith(".lock"):
                shutil.copyfile(file, folder / file.name)
        spec = _verified(ref, folder)
    if spec is None:
        spec = _export(ref, folder)
    return ComponentSource("sentence_encoder", "sentence_encoder", "onnx+tokenizer+json", folder, spec["parity"],
                           {"ref": ref})


def _export(ref: str, folder: Path) -> dict:
    """Trace, write and check the graph of encoder `ref` in `folder`; its spec, parity included."""
    spec_path = folder / ENCODER_SPEC
    model = torch_encoder.load(ref)
    pooling = _pooling(model)
    _emptied(folder)
    model.tokenizer.save_pretrained(str(folder))
    _export_graph(model, folder / ENCODER_GRAPH, pooling)
    spec = {"ref": ref, "max_length": int(model.max_seq_length), "dim": int(model.get_sentence_embedding_dimension()),
            "pooling": pooling, "normalized": True, "inputs": ["input_ids", "attention_mask"], "output": "embedding",
            "graph_sha256": sha256_file(folder / ENCODER_GRAPH)}
    spec_path.write_text(json.dumps(spec, indent=2, sort_keys=True))
    spec["parity"] = parity(folder, ref)
    partial = spec_path.with_suffix(".partial")
    partial.write_text(json.dumps(spec, indent=2, sort_keys=True))
    partial.replace(spec_path)  # whole or not at all: a kill here leaves the spec without parity, redone above
    return spec
