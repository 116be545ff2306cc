"""RouterDC's dual contrastive fine-tuning of the whole sentence encoder (Chen et al., NeurIPS 2024).

The encoder's pooled embedding of a prompt is compared by cosine with one learned embedding per
model. The sample–LLM loss pulls each prompt toward each of its top-k models (a top model that
scored 0 is skipped) against its bottom-k (a bottom model that scored above 0.5 is left out); the
sample–sample loss pulls a prompt toward another prompt of its cluster against H prompts of other
clusters. RouterDC uses mDeBERTa, the [CLS] state, lr 5e-5, batch 64, 1,000 steps, top-k = last-k =
H = 3 and temperature 1; here the encoder is any sentence-transformers model (MiniLM offline) with
its own pooling. Routing picks the model of highest cosine.

This fine-tunes the encoder, so it is meant for a GPU: on the 2-core CPU one fold of 1,000 steps
takes far longer than the rest of router selection, and it is not part of the default family.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from routeforge.core.pretrained import resolve_pretrained


@dataclass(frozen=True)
class RouterDcSettings:
    steps: int = 1000
    batch_size: int = 64
    lr: float = 5e-5
    top_k: int = 3
    last_k: int = 3
    negatives: int = 3  # H
    temperature: float = 1.0
    cluster_weight: float = 1.0
    max_length: int = 256
    seed: int = 0


def sample_llm_loss(logits, scores, top_k: int, last_k: int, known=None):
    """RouterDC's sample–LLM contrastive loss on (batch, models) logits and scores in [0, 1]: each
    of the top-k models (skipped where it scored 0) against the bottom-k (those above 0.5 left out).
    `known` (bool, same shape) marks labelled pairs; an unlabelled one is neither positive nor negative."""
    import torch

    m = logits.shape[1]
    top_k, last_k = max(1, min(top_k, m - 1)), max(1, min(last_k, m - 1))  # a fleet may have few models
    if known is not None:
        ranked, bottom = torch.where(known, scores, -1.0), torch.where(known, scores, 2.0)
    else:
        ranked = bottom = scores
    top_true, top_idx = ranked.sort(dim=1, descending=True)
    low_true, low_idx = bottom.topk(last_k, largest=False, dim=1)
    negatives = torch.gather(logits, 1, low_idx).masked_fill(low_true > 0.5, float("-inf"))
    loss = logits.new_zeros(())
    for k in range(top_k):
        positive = torch.gather(logits, 1, top_idx[:, k:k + 1])
        keep = (top_true[:, k] > 0).float()
        logp = torch.log_softmax(torch.cat([positive, negatives], dim=1), dim=1)[:, 0]
        loss = loss - (logp * keep).sum() / keep.sum().clamp(min=1)
    return loss


def sample_sample_loss(z, clusters, negatives: int, generator, temperature: float = 1.0):
    """RouterDC's sample–sample loss: per row, one random same-cluster positive against `negatives`
    random other-cluster prompts, over cosine logits (z is L2-normalized); rows without enough of
    either are left out."""
    import torch

    n = len(z)
    same = (clusters[:, None] == clusters[None, :]) & ~torch.eye(n, dtype=torch.bool, device=z.device)
    other = clusters[:, None] != clusters[None, :]
    rows = same.any(1) & (other.sum(1) >= negatives)
    if not rows.any():
        return z.new_zeros(())
    noise = torch.rand(n, n, generator=generator).to(z.device)
    pos = torch.where(same, noise, -1.0).argmax(1)
    neg = torch.where(other, noise, -1.0).topk(negatives, dim=1).indices
    sims = z @ z.T / temperature
    sel = torch.cat([torch.gather(sims, 1, pos[:, None]), torch.gather(sims, 1, neg)], dim=1)
    return -torch.log_softmax(sel[rows], dim=1)[:, 0].mean()


def finetune(texts: list[str], scores: np.ndarray, clusters: np.ndarray, encoder_ref: str,
             settings: RouterDcSettings = RouterDcSettings(), device: str | None = None, log=print):
    """Fine-tune a copy of the encoder; returns (SentenceTransformer, model embeddings (m, d) tensor)."""
    import torch
    import torch.nn.functional as F
    from sentence_transformers import SentenceTransformer

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(settings.seed)
    gen = torch.Generator().manual_seed(settings.seed)
    model = SentenceTransformer(resolve_pretrained(encoder_ref), device=device).float()  # a half copy trains in fp32
    model.max_seq_length = settings.max_length
    model.tokenizer.truncation_side = "left"  # RouterDC keeps the end of a long prompt
    dim = (model.get_embedding_dimension() if hasattr(model, "get_embedding_dimension")
           else model.get_sentence_embedding_dimension())  # renamed in sentence-transformers 6
    emb = torch.nn.Parameter(torch.randn(scores.shape[1], dim, device=device) * 0.78)
    opt = torch.optim.AdamW([*model.parameters(), emb], lr=settings.lr)
    y = torch.tensor(np.nan_to_num(scores, nan=0.0), dtype=torch.float32, device=device)
    c = torch.tensor(clusters, device=device)
    model.train()
    order: list[int] = []
    for step in range(settings.steps):
        if len(order) < settings.batch_size:
            order = list(np.random.default_rng(settings.seed + step).permutation(len(texts)))
        batch, order = order[:settings.batch_size], order[settings.batch_size:]
        features = model.tokenize([texts[i] for i in batch])
        features = {k: v.to(device) if hasattr(v, "to") else v for k, v in features.items()}
        z = F.normalize(model(features)["sentence_embedding"], dim=1)
        logits = z @ F.normalize(emb, dim=1).T / settings.temperature
        loss = sample_llm_loss(logits, y[batch], settings.top_k, settings.last_k)
        if settings.cluster_weight:
            loss = loss + settings.cluster_weight * sample_sample_loss(z, c[batch], settings.negatives, gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 200 == 0 or step == settings.steps - 1:
            log(f"routerdc step {step}: loss {loss.item():.4f}")
    model.eval()
    return model, F.normalize(emb.detach(), dim=1)


def route_scores(model, model_emb, texts: list[str], batch_size: int = 128):
    """Cosine of each prompt with each model embedding: (n, m)."""
    import torch

    with torch.no_grad():
        z = model.encode(texts, batch_size=batch_size, convert_to_tensor=True, normalize_embeddings=True)
        return (z @ model_emb.T).float().cpu().numpy()
