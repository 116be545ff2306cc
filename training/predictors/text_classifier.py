"""Fine-tune a BERT-family encoder to classify prompts (task, output-length bucket, score bucket).

One trainer for every text predictor of 000/001: the Hugging Face `Trainer` over
`AutoModelForSequenceClassification` (DistilBERT by default in production configs; the MiniLM
backbone offline). Optional special tokens per candidate model make one predictor serve every model
(000: the prompt is prefixed with the model's token). Long few-shot prompts are truncated from the
left so the question at their end survives. The result is saved as safetensors + tokenizer files
and packaged for the runtime by `training.predictors.packaging` (ONNX, shared embeddings, int8).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from routeforge.core.pretrained import resolve_pretrained


@dataclass
class ClassifierSettings:
    backbone: str = "distilbert-base-uncased"
    max_length: int = 128
    epochs: float = 3.0
    batch_size: int = 32
    learning_rate: float = 5e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.06
    seed: int = 0
    truncation_side: str = "left"
    model_tokens: list[str] = field(default_factory=list)  # one special token per model (000)
    freeze_word_embeddings: bool = True  # shared, as pretrained, by every predictor of the backbone
    export_precision: str = "int8"  # or "float32" (see `training.predictors.packaging`)


def model_token(model: str) -> str:
    return f"<model:{model}>"


def _tokenizer(path: str, settings: ClassifierSettings):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.truncation_side = settings.truncation_side
    if settings.model_tokens:
        tokenizer.add_special_tokens({"additional_special_tokens": list(settings.model_tokens)})
    return tokenizer


def train_classifier(texts: Sequence[str], labels: Sequence[int], n_labels: int, settings: ClassifierSettings,
                     out_dir: Path, log: Callable[[str], None] = print) -> dict:
    """Fine-tune and save to `out_dir` (safetensors, tokenizer, `training.json` with the learning
    curve); returns the training summary."""
    import torch
    from datasets import Dataset
    from transformers import (
        AutoModelForSequenceClassification,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
        set_seed,
    )

    set_seed(settings.seed)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    path = resolve_pretrained(settings.backbone)
    tokenizer = _tokenizer(path, settings)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=n_labels)
    if settings.model_tokens:
        model.resize_token_embeddings(len(tokenizer))
    if settings.freeze_word_embeddings:
        # added model-token rows keep their (seeded) initial values too and are stored per predictor
        model.get_input_embeddings().weight.requires_grad_(False)
    data = Dataset.from_dict({"text": list(texts), "label": [int(x) for x in labels]})
    data = data.map(lambda b: tokenizer(b["text"], truncation=True, max_length=settings.max_length),
                    batched=True, remove_columns=["text"])
    args = TrainingArguments(
        output_dir=str(out_dir / "checkpoints"), num_train_epochs=settings.epochs,
        per_device_train_batch_size=settings.batch_size, learning_rate=settings.learning_rate,
        weight_decay=settings.weight_decay, warmup_steps=settings.warmup_ratio, seed=settings.seed,  # < 1: a ratio (v5)
        logging_steps=max(1, len(data) // settings.batch_size // 10), save_strategy="no", report_to=[],
        use_cpu=not torch.cuda.is_available(), disable_tqdm=False, dataloader_num_workers=0,
    )
    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=DataCollatorWithPadding(tokenizer))
    start = time.perf_counter()
    result = trainer.train()
    seconds = time.perf_counter() - start
    model_dir = out_dir / "model"
    trainer.model.save_pretrained(model_dir, safe_serialization=True)
    tokenizer.save_pretrained(model_dir)
    curve = [{"step": h["step"], "epoch": h.get("epoch"), "loss": h["loss"]} for h in trainer.state.log_history
             if "loss" in h]
    summary = {"settings": asdict(settings), "n_labels": n_labels, "train_rows": len(data), "seconds": seconds,
               "train_loss": result.training_loss, "learning_curve": curve}
    (out_dir / "training.json").write_text(json.dumps(summary, indent=2))
    log(f"trained {n_labels}-way classifier on {len(data)} rows in {seconds:.0f} s (loss {result.training_loss:.3f})")
    return summary
