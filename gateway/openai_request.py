"""What the gateway reads of an OpenAI request body before deciding where it goes: the prompt (text,
or token ids as the completions API takes them), its token count, its prefix blocks, the output
length the client allows and the model it named. Malformed bodies are refused with one message
naming the field (`BadRequest`, answered 400)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from routeforge.artifacts.deciding.dispatch import text_blocks, token_blocks
from routeforge.artifacts.operating.traffic_prompts import LogLineError, prompt_text

KINDS = ("completions", "chat/completions")
DEFAULT_MAX_TOKENS = 128  # the output a request without max_tokens is expected to take (the dispatcher's default)
CHARS_PER_TOKEN = 4.0  # a text prompt's token count where no tokenizer is given


class BadRequest(ValueError):
    """A body the gateway cannot route; the message names the field."""


@dataclass(frozen=True)
class Prepared:
    body: dict[str, Any]
    kind: str  # "completions" or "chat/completions"
    text: str | None  # the prompt as text (None: token ids)
    prompt_tokens: int
    blocks: list[int]  # chained hashes of the prompt's leading blocks
    block_tokens: int  # tokens per block
    max_tokens: int
    model: str | None  # the model the client named
    stream: bool


def prepare(raw: bytes, kind: str, block_tokens: int,
            count_tokens: Callable[[str], int | None] | None = None) -> Prepared:
    """The body's routing facts. Token-id prompts (a list of ints, or a list of one such list) are
    counted and cut into blocks of `block_tokens` ids; text prompts are counted by `count_tokens`
    (where it gives none: characters / 4) and cut into `dispatch.text_blocks` (llm-d's approximate
    prefix scorer's 64-character chunks), each as many tokens as its share of the text."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("the body is not a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest("field 'model' is not a string")
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens", DEFAULT_MAX_TOKENS))
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise BadRequest(f"field 'max_tokens': a positive integer, got {max_tokens!r}")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("field 'stream' is not true or false")
    if kind == "chat/completions" and "messages" not in body:
        raise BadRequest("field 'messages' missing (a chat completion)")
    if kind == "completions" and "prompt" not in body:
        raise BadRequest("field 'prompt' missing (a completion)")
    ids = _token_ids(body.get("prompt")) if kind == "completions" else None
    if ids is not None:
        if not ids:
            raise BadRequest("field 'prompt' is an empty list of token ids")
        return Prepared(body, kind, None, len(ids), token_blocks(ids, block_tokens), block_tokens, max_tokens,
                        model, stream)
    try:
        text = prompt_text(body)
    except LogLineError as exc:
        raise BadRequest(str(exc).replace("request.", "")) from None
    tokens = (count_tokens(text) if count_tokens else None) or max(1, math.ceil(len(text) / CHARS_PER_TOKEN))
    blocks, per_block = text_blocks(text, tokens)
    return Prepared(body, kind, text, tokens, blocks, per_block or block_tokens, max_tokens, model, stream)


def _token_ids(prompt: Any) -> list[int] | None:
    """The prompt's token ids where it is given as ids, else None (text). A list of several prompts
    (a batch) is refused: each is its own routing decision."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return prompt
    if isinstance(prompt, list) and len(prompt) > 1:
        raise BadRequest("field 'prompt': a batch of prompts; the gateway routes one prompt a request")
    if isinstance(prompt, list) and not prompt:
        return []
    return None
