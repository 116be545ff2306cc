"""Golden vectors: what this bundle's own runtime computes for a few hundred prompts and states, shipped
in the bundle, so that a second implementation (docs/bundle-format.md; runtimes/typescript/) can
prove it decides as this one does, and this one can prove it still does after an upgrade.

The `golden_vectors` component holds:

- `golden.json`: the prompts, and per part what the runtime made of them:
  - `encoder`: the truncation side the router embeds with and `max_length`;
  - `router`: per λ in `lams`, the model each prompt is routed to, and the guard's cluster,
    guarded, unseen and recalled flags (`Router.predict`: recall applied, no online shift);
  - `latency`: per `latency_heads` component, states at dispatch (seeded draws over the ranges the
    heads were trained on, a tenth beyond them, a few with the optional features missing) and the
    heads' `tpot`, `ttft`, `e2e` (and `e2e_direct`) for each;
  - `heuristics`: per heuristic `routing_policy`, request and instance telemetry drawn at random and
    the instance the policy picks, in order (round-robin keeps state from one case to the next);
  - `recommendations`: traffic statistics drawn around the evaluated ones, an objective, and the
    policy `RouterBundle.recommended_policy_for` names (`routing_simulator`'s per-traffic table);
- `vectors.safetensors`: `input_ids` and `attention_mask` (prompts × longest, right-padded with
  the pad id, mask 0), the encoder's `embeddings` (float32) and `router_quality` (float64,
  prompts × models), which a second runtime must match within 1e-5.

Built at registration from the staged components (`build_golden`), after every other component, so
the signed manifest covers it; `check_golden` recomputes it with this runtime.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from routeforge.artifacts.deciding.components import component_kind, register_component
from routeforge.artifacts.deciding.recommendation import STAT_KEYS, recommend

GOLDEN_FILE, VECTORS_FILE = "golden.json", "vectors.safetensors"
FORMAT = 1
EXTRA_PROMPTS = (  # the edges a port gets wrong: accents and CJK, emoji, an empty-looking prompt, truncation
    "Café naïve résumé — Ünïcödé façade?", "日本語のテキストを英語に翻訳してください。",
    "Rate this 🙂👍🏽 review: great!", "   ?   ", "word " * 400,
)


GOLDEN_PROMPTS = 200  # a smaller prompt set is topped up with variants of its own prompts (`_variants`)


def _variants(prompts: list[str], n: int) -> list[str]:
    """Up to `n` deterministic variants of `prompts`: spaced out (recall must still find them),
    upper- and lower-cased, halved, asked politely, and each joined with the next (a prompt between
    two tasks)."""
    if n <= 0 or not prompts:
        return []
    out = []
    for i, p in enumerate(prompts):
        out += ["  " + p.replace(" ", "  ") + " \n", p.upper(), p[: max(1, len(p) // 2)],
                p + " " + prompts[(i + 1) % len(prompts)], p.lower(), "Please help with this: " + p]
    return list(dict.fromkeys(out))[:n]


def _loaded(source) -> Any:
    return component_kind(source.kind, source.config).load(Path(source.folder))


def _states(spec: dict[str, Any], features: list[str], n: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    """Seeded states over the heads' trained ranges (a tenth up to 50% beyond them); features the
    heads never saw values for are missing (None), and so is one optional feature in a few."""
    ranges = spec.get("range") or {}
    states = []
    for i in range(n):
        state: dict[str, Any] = {}
        for f in features:
            low, high = ranges.get(f, (None, None))
            if low is None:
                state[f] = None
                continue
            stretch = 1.5 if i % 10 == 9 else 1.0
            value = float(rng.uniform(low, low + (high - low) * stretch if high > low else high * stretch + 1))
            state[f] = round(value, 3) if f.endswith("_s") or "rate" in f or "usage" in f else float(round(value))
        states.append(state)
    return states


def _heuristic_cases(m: int, n: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    """Random requests and telemetry, in sequence (a heuristic's state carries over): every request
    also carries block ids, chains of four conversations that share prefixes, and every instance the
    KV figures the deployed routers read; half the cases report each instance's cached blocks (KV
    events), the rest leave the routers to their own index; the router's clock advances up to 10 s a
    case (so indexes that age do), and half the instances give their queued prefill tokens."""
    cases, now = [], 0.0
    for _ in range(n):
        now = round(now + float(rng.uniform(0, 10)), 3)
        conversation, length = int(rng.integers(0, 4)), int(rng.integers(1, 12))
        request = {"prompt_tokens": int(rng.integers(1, 2000)),
                   "predicted_output_tokens": [int(v) for v in rng.integers(1, 1000, m)],
                   "predicted_quality": [round(float(v), 4) for v in rng.random(m)],
                   "hash_ids": [conversation * 1000 + k for k in range(length)], "block_tokens": 16, "now_s": now}
        told = bool(rng.random() < 0.5)
        instances = []
        for _ in range(m):
            max_running = int(rng.integers(1, 9))
            running = [{"predicted_output_tokens": int(rng.integers(1, 800)),
                        "generated_tokens": int(rng.integers(0, 400))}
                       for _ in range(int(rng.integers(0, max_running + 1)))]
            waiting = [{"prompt_tokens": int(rng.integers(1, 2000)),
                        "predicted_output_tokens": int(rng.integers(1, 800))}
                       for _ in range(int(rng.integers(0, 4)) if len(running) == max_running else 0)]
            instances.append({"max_running": max_running, "tpot_s": round(float(rng.uniform(0.005, 0.08)), 5),
                              "prefill_s_per_token": round(float(rng.uniform(1e-5, 5e-4)), 7),
                              "running": running,
                              "waiting": waiting, "kv_utilization": round(float(rng.random()), 4),
                              "kv_capacity_tokens": int(rng.integers(64, 4000)),
                              "active_tokens": int(rng.integers(0, 3000)),
                              **({"queued_prefill_tokens": int(rng.integers(0, 5000))} if rng.random() < 0.5 else {}),
                              **({"cached_prefix_blocks": int(rng.integers(0, length + 1))} if told else {})})
        cases.append({"request": request, "instances": instances})
    return cases


def _recommendations(path: Path, rng: np.random.Generator, n: int = 40) -> list[dict[str, Any]]:
    """Traffic statistics drawn around the evaluated ones, each objective's recommended policy for them."""
    table = json.loads(path.read_text()).get("recommendations") or []
    objectives = sorted({o for e in table for o in e.get("best", {})})
    out = []
    for i in range(n if table else 0):
        base = table[i % len(table)]["stats"]
        stats = {k: round(float(base[k]) * float(rng.uniform(0.5, 2.0)), 4) for k in STAT_KEYS if k in base}
        if i % 4 == 3:  # some with one statistic only
            key = sorted(stats)[i % len(stats)]
            stats = {key: stats[key]}
        objective = objectives[i % len(objectives)]
        out.append({"stats": stats, "objective": objective, "policy": recommend(table, stats, objective)["policy"]})
    return out


def build_golden(components: Sequence, prompts: Sequence[str], folder: Path, seed: int = 0,
                 cases: int = 100) -> bool:
    """Write the golden vectors of the staged `components` (`ComponentSource`s) into `folder`;
    False (nothing written) for a bundle without a sentence encoder and a router."""
    from safetensors.numpy import save_file

    by_kind: dict[str, list] = {}
    for c in components:
        by_kind.setdefault(c.kind, []).append(c)
    if "sentence_encoder" not in by_kind or "router" not in by_kind:
        return False
    encoder, router = _loaded(by_kind["sentence_encoder"][0]), _loaded(by_kind["router"][0])
    router.encoder = encoder
    side = router.meta["encoder"].get("truncation_side", "right")
    texts = list(dict.fromkeys([*prompts, *_variants(list(prompts), GOLDEN_PROMPTS - len(prompts)), *EXTRA_PROMPTS]))
    tokenized = [encoder.tokenizer([t], side) for t in texts]
    longest = max(ids.shape[1] for ids, _ in tokenized)
    pad = encoder.tokenizer.tokenizer.padding["pad_id"]
    input_ids = np.full((len(texts), longest), pad, dtype=np.int64)
    attention = np.zeros((len(texts), longest), dtype=np.int64)
    for i, (ids, mask) in enumerate(tokenized):
        input_ids[i, :ids.shape[1]], attention[i, :ids.shape[1]] = ids[0], mask[0]
    embeddings = encoder.encode(texts, side)
    prediction = router.apply_recall(texts, router.predict_embeddings(embeddings))
    # λ = 0, the calibration table's first rows, and three where cost decides: a twentieth, a fifth
    # and all of a quality point per the spread of the models' costs
    table = router.meta.get("budget") or {}
    spread = float(np.nan_to_num(np.ptp(np.nan_to_num(prediction.cost[0])))) if len(texts) else 0.0
    lams = sorted({0.0, *(float(r["lam"]) for r in table.get("rows", [])[:6]),
                   *((0.05 / spread, 0.2 / spread, 1.0 / spread) if spread > 0 else ())})
    rng = np.random.default_rng(seed)
    golden: dict[str, Any] = {
        "format": FORMAT, "prompts": texts,
        "encoder": {"component": by_kind["sentence_encoder"][0].name, "truncation_side": side,
                    "max_length": int(encoder.spec["max_length"])},
        "router": {"component": by_kind["router"][0].name, "models": list(router.models), "lams": lams,
                   "choices": [prediction.best_model(lam) for lam in lams],
                   "cluster": prediction.cluster.tolist(), "guarded": prediction.guarded.tolist(),
                   "unseen": prediction.unseen.tolist(), "recalled": prediction.recalled.tolist()},
        "latency": [], "heuristics": [],
    }
    for source in by_kind.get("latency_heads", []):
        model = _loaded(source)
        if not model.heads:
            continue
        states = _states(model.spec, model.features, cases, rng)
        got = model.predict_matrix(model.matrix(states))
        golden["latency"].append({"component": source.name, "tier": model.tier, "states": states,
                                  "predictions": {k: [float(v) for v in vs] for k, vs in got.items()}})
    for source in by_kind.get("routing_policy", []):
        if source.config.get("policy_kind") != "heuristic":
            continue
        policy = _loaded(source)
        m = int(policy.spec.get("instances", 2))
        drawn = _heuristic_cases(m, cases, rng)
        golden["heuristics"].append({"component": source.name, "heuristic": policy.name, "cases": drawn,
                                     "choices": [policy.route(c["request"], c["instances"]) for c in drawn]})
    for source in by_kind.get("routing_simulator", []):
        golden["recommendations"] = _recommendations(Path(source.folder) / "simulator.json", rng)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / GOLDEN_FILE).write_text(json.dumps(golden, sort_keys=True, allow_nan=False))
    save_file({"input_ids": input_ids, "attention_mask": attention, "embeddings": embeddings.astype(np.float32),
               "router_quality": np.ascontiguousarray(prediction.quality, dtype=np.float64)},
              str(folder / VECTORS_FILE))
    return True


def refresh_golden(components: Sequence) -> None:
    """Rebuild the `golden_vectors` component among `components` in place, on its own prompts, from
    the others (a new version whose router changed: `routeforge bundle add-model`)."""
    golden = next((c for c in components if c.kind == "golden_vectors"), None)
    if golden is None:
        return
    folder = Path(golden.folder)
    prompts = [p for p in json.loads((folder / GOLDEN_FILE).read_text())["prompts"] if p not in EXTRA_PROMPTS]
    for f in folder.iterdir():
        f.unlink()
    build_golden([c for c in components if c is not golden], prompts, folder)


@register_component("golden_vectors")
@dataclass
class GoldenVectors:
    spec: dict[str, Any]
    arrays: dict[str, np.ndarray]

    @classmethod
    def load(cls, folder: Path) -> GoldenVectors:
        from safetensors.numpy import load_file

        folder = Path(folder)
        return cls(json.loads((folder / GOLDEN_FILE).read_text()), load_file(str(folder / VECTORS_FILE)))


def check_golden(bundle, tolerance: float = 1e-5) -> list[str]:
    """What this runtime computes differently from the bundle's golden vectors (empty: all agree)."""
    golden = bundle.component(next(c.name for c in bundle.manifest.components if c.kind == "golden_vectors"))
    spec, arrays = golden.spec, golden.arrays
    texts = spec["prompts"]
    problems = []
    router = bundle.router()
    embeddings = router.encoder.encode(texts, spec["encoder"]["truncation_side"])
    worst = float(np.abs(embeddings - arrays["embeddings"]).max())
    if worst > tolerance:
        problems.append(f"embeddings differ by up to {worst:.3g}")
    prediction = router.apply_recall(texts, router.predict_embeddings(embeddings))
    worst = float(np.nanmax(np.abs(prediction.quality - arrays["router_quality"])))
    if worst > tolerance:
        problems.append(f"router quality differs by up to {worst:.3g}")
    for lam, expected in zip(spec["router"]["lams"], spec["router"]["choices"]):
        got = prediction.best_model(lam)
        wrong = sum(a != b for a, b in zip(got, expected))
        if wrong:
            problems.append(f"λ = {lam:g}: {wrong} routing decisions differ")
    for part in spec["latency"]:
        model = bundle.component(part["component"])
        got = model.predict_matrix(model.matrix(part["states"]))
        for key, expected in part["predictions"].items():
            diff = float(np.max(np.abs(got[key] - np.asarray(expected)))) if expected else 0.0
            if not math.isfinite(diff) or diff > tolerance:
                problems.append(f"{part['component']}: {key} differs by up to {diff:.3g}")
    if spec.get("recommendations"):
        table = bundle.simulator_spec()["recommendations"]
        wrong = sum(recommend(table, r["stats"], r["objective"])["policy"] != r["policy"]
                    for r in spec["recommendations"])
        if wrong:
            problems.append(f"{wrong} per-traffic recommendations differ")
    for part in spec["heuristics"]:  # loaded afresh, not `bundle.component`: round-robin must start at 0
        policy = component_kind("routing_policy", {"policy_kind": "heuristic"}).load(
            bundle.verified_copy(part["component"]))
        got = [policy.route(c["request"], c["instances"]) for c in part["cases"]]
        wrong = sum(a != b for a, b in zip(got, part["choices"]))
        if wrong:
            problems.append(f"{part['component']}: {wrong} choices differ")
    return problems
