"""Generation settings shared by every engine."""

from __future__ import annotations

from pydantic import Field
from routeforge.core.config.base import ModelRef, _Strict
from routeforge.core.config.models import Sampling
from routeforge.core.pretrained import ENCODER_PACKAGE_REF


class ResponseFilters(_Strict):
    """METHODS.md's response filters, recorded as flags on the row (never silent drops)."""

    min_output_tokens: int = Field(default=3, ge=0)  # responses shorter than this many tokens are flagged
    min_compression_ratio: float = Field(default=0.2, ge=0)  # zlib compressed / raw bytes


class GenerationSettings(_Strict):
    sampling: Sampling = Sampling()
    batch_size: int = Field(default=8, gt=0)  # prompts per engine call
    shard_size: int = Field(default=64, gt=0)  # rows per cache shard: the most a crash can lose
    token_counter: ModelRef = ENCODER_PACKAGE_REF  # tokenizer that counts tokens of imported text
    filters: ResponseFilters = ResponseFilters()
