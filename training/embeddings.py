"""Sentence embeddings with a durable cache, so the stages that embed the same prompts (the KNN
index, its leave-one-task-out evaluation, router selection) pay for each text once per encoder.

Two backends give the same embeddings: PyTorch (sentence-transformers), the default, and ONNX
Runtime over the graph the bundle ships (`training.encoder_export`, exported once per encoder under
`torch_encoder.encoder_cache_root()` and reused; prompts batched by length). Choose with
$ROUTEFORGE_ENCODER_BACKEND (`torch` | `onnx`). Their embeddings agree to rounding and route
identically; PyTorch stays the default because on a CPU the float32 graph is not faster, and the
int8 graph, though faster, fails parity (`benchmarks/encoder_backends.py` measures both; docs/results.md).

Keys are sha256(encoder ref, truncation side[, backend], text): the PyTorch backend keeps the keys it
always had, the ONNX one adds its name; rows live in `core.storage.ShardCache` shards (atomic
Parquet files), so a killed run keeps what it finished. A local encoder folder is keyed by its path:
replace its weights under a new path, or clear the cache, when they change.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from routeforge.artifacts.deciding.sentence_encoder import SentenceEncoder
from routeforge.core.progress import Counted
from routeforge.core.storage import ShardCache
from routeforge.training import torch_encoder
from routeforge.training.encoder_export import shared_export
from routeforge.training.parallel import chunks, current_pool

SCHEMA = pa.schema([pa.field("cache_key", pa.string(), nullable=False),
                    pa.field("vector", pa.list_(pa.float32()), nullable=False)])


BACKEND_ENV = "ROUTEFORGE_ENCODER_BACKEND"
SAVE_EVERY = 16_384  # texts embedded per call and per cache shard (bounded memory; a crash loses one part)
BACKENDS = ("onnx", "torch")


def default_backend() -> str:
    """$ROUTEFORGE_ENCODER_BACKEND, else PyTorch."""
    backend = os.environ.get(BACKEND_ENV, "torch")
    if backend not in BACKENDS:
        raise ValueError(f"${BACKEND_ENV}: {backend!r} is not one of {', '.join(BACKENDS)}")
    return backend


def onnx_encoder_folder(ref: str) -> Path:
    """Where the ONNX export of encoder `ref` is kept: the machine's shared export
    (`encoder_export.shared_export`, exported on first use under a file lock and reused while it verifies)."""
    return shared_export(ref)


@lru_cache(maxsize=4)
def onnx_encoder(ref: str):
    """The encoder `ref` on ONNX Runtime, from its shared export (`onnx_encoder_folder`)."""
    return SentenceEncoder.load(onnx_encoder_folder(ref))


def encode(texts: list[str], ref: str, batch_size: int = 64, log: Callable[[str], None] | None = None,
           truncation_side: str = "right", chunk: int = 1024, backend: str | None = None) -> np.ndarray:
    """L2-normalized float32 embeddings, so inner product equals cosine, on `backend` (default:
    `default_backend()`).

    Texts longer than the encoder's window (256 word pieces for MiniLM) are cut on
    `truncation_side`; "left" keeps their end, where a few-shot prompt puts its actual question.
    With `log`, texts are encoded `chunk` at a time and the count reported (`core.progress`)."""
    counted = Counted(log, f"embedding ({truncation_side} truncation)", len(texts), "prompts")
    # one call when nobody is told, up to SAVE_EVERY texts: sentence-transformers holds a Python
    # tensor per text until its call returns (10^6 texts in one call: past 8 GiB)
    step = chunk if log is not None else max(min(len(texts), SAVE_EVERY), 1)
    parts = []
    with _encoder(ref, backend or default_backend(), truncation_side, batch_size) as embed:
        for start in range(0, max(len(texts), 1), step):
            parts.append(embed(texts[start:start + step]))
            counted.count(min(start + step, len(texts)))
    return np.ascontiguousarray(np.concatenate(parts) if len(parts) > 1 else parts[0], dtype=np.float32)


@contextmanager
def _encoder(ref: str, backend: str, truncation_side: str, batch_size: int):
    """texts → embeddings on `backend`, cutting long texts on `truncation_side`."""
    if backend == "onnx":
        encoder = onnx_encoder(ref)
        yield lambda texts: encoder.encode(texts, truncation_side, batch_size)
        return
    with torch_encoder.cutting(ref, truncation_side) as model:
        yield lambda texts: torch_encoder.embed(model, texts, batch_size)


def _key(ref: str, truncation_side: str, text: str, backend: str = "torch") -> str:
    tag = "" if backend == "torch" else f"{backend}\x1f"
    return hashlib.sha256(f"{ref}\x1f{truncation_side}\x1f{tag}{text}".encode()).hexdigest()[:32]


def encode_cached(texts: list[str], ref: str, truncation_side: str = "right",
                  cache_dir: Path | None = None, log: Callable[[str], None] | None = None) -> np.ndarray:
    """L2-normalized float32 embeddings of `texts` (as `encode`), read from and
    added to the cache under `cache_dir` when one is given; `log` hears the count of texts
    the cache did not hold as they are encoded. Only texts the cache lacks are embedded: a day's
    new prompts cost their own embedding, not the whole set's (counted in `embedding_counts`)."""
    if cache_dir is None:
        return encode(texts, ref, truncation_side=truncation_side, log=log)
    backend = default_backend()
    cache = ShardCache(Path(cache_dir), SCHEMA)
    keys = pa.array([_key(ref, truncation_side, t, backend) for t in texts], pa.string())
    out: np.ndarray | None = None
    found = np.zeros(len(texts), dtype=bool)

    def fill(table: pa.Table) -> None:  # the rows of `table` that texts not yet filled ask for
        nonlocal out
        where = pc.index_in(keys, value_set=table.column("cache_key")).fill_null(-1).to_numpy()
        hit = (where >= 0) & ~found
        if hit.any():
            vectors = _rows(table.column("vector"), where[hit])
            if out is None:
                out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
            out[hit] = vectors
            found[hit] = True

    for table in cache.tables():  # a shard at a time: the whole cache is never in memory at once
        fill(table)
    todo = np.flatnonzero(~found)
    cached = len(texts) - len(todo)
    new_keys = pc.unique(keys.take(pa.array(todo, pa.int64())))
    if len(new_keys):
        first = pc.index_in(new_keys, value_set=keys).to_numpy()  # one text per distinct new key
        for start in range(0, len(first), SAVE_EVERY):  # each part a shard: a killed run keeps what it did
            part = first[start:start + SAVE_EVERY]
            vectors = _encode_spread([texts[i] for i in part], ref, truncation_side, backend, log)
            new = pa.table({"cache_key": new_keys.slice(start, len(part)),
                            "vector": pa.FixedSizeListArray.from_arrays(vectors.astype(np.float32).ravel(),
                                                                        vectors.shape[1]).cast(pa.list_(pa.float32()))})
            cache.append(new)
            fill(new.cast(SCHEMA))
        cache.compact()
    _count(len(new_keys), cached)
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    if log is not None:
        log(f"embedding cache: {len(new_keys)} new of {len(texts)} texts ({cached} from the cache)")
    return out


def _encode_spread(texts: list[str], ref: str, truncation_side: str, backend: str,
                   log: Callable[[str], None] | None, batch_size: int = 64) -> np.ndarray:
    """`encode` here, or in contiguous chunks of whole batches across the step's Ray workers
    (`training.parallel`), concatenated in order."""
    pool = current_pool()
    if pool.workers <= 1 or len(texts) < 2 * batch_size:
        return encode(texts, ref, truncation_side=truncation_side, log=log, backend=backend)
    parts = chunks(len(texts), pool.workers, batch_size)
    if log is not None:
        log(f"embedding {len(texts)} texts as {len(parts)} tasks on {pool.workers} workers")
    done = pool.map(_encode_chunk, [(texts[part], ref, truncation_side, backend) for part in parts])
    return np.concatenate(done, axis=0)


def _encode_chunk(texts: list[str], ref: str, truncation_side: str, backend: str) -> np.ndarray:
    return encode(texts, ref, truncation_side=truncation_side, backend=backend)


def _rows(column: pa.ChunkedArray, positions: np.ndarray) -> np.ndarray:
    """The vectors at `positions` of a list<float32> column, as one contiguous float32 matrix."""
    picked = column.take(pa.array(positions, pa.int64())).combine_chunks()
    flat = picked.flatten().to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(flat.reshape(len(positions), -1), dtype=np.float32)


_COUNTS: ContextVar[Counter | None] = ContextVar("embedding_counts", default=None)


def _count(embedded: int, cached: int) -> None:
    counts = _COUNTS.get()
    if counts is not None:
        counts.update(embedded=embedded, from_cache=cached)


@contextmanager
def embedding_counts() -> Iterator[Counter]:
    """Count, within the block, the texts embedded and those read from the embedding cache (what an
    asset reports in its metadata)."""
    counts: Counter = Counter(embedded=0, from_cache=0)
    token = _COUNTS.set(counts)
    try:
        yield counts
    finally:
        _COUNTS.reset(token)


class TrainingEncoder:
    """The training encoder behind the runtime's encoder interface (`encode(texts, truncation_side)`,
    as `routeforge.artifacts.deciding.sentence_encoder.SentenceEncoder`), through the cache: what training
    code passes to a router's or KNN estimator's `predict`. `backend`: "torch" forces PyTorch
    (what the parity tests compare with), else the default backend and the cache. `log` hears the
    count and rate of the texts embedded (an evaluation's test split can take minutes to embed)."""

    def __init__(self, ref: str, cache_dir: Path | None = None, backend: str | None = None,
                 log: Callable[[str], None] | None = None):
        self.ref, self.cache_dir, self.backend, self.log = ref, cache_dir, backend, log

    def encode(self, texts, truncation_side: str = "right", batch_size: int = 64) -> np.ndarray:
        if self.backend is not None:
            return encode(list(texts), self.ref, batch_size=batch_size, truncation_side=truncation_side,
                          backend=self.backend, log=self.log)
        return encode_cached(list(texts), self.ref, truncation_side, self.cache_dir, log=self.log)
