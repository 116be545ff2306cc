"""How a chunk of an OpenAI-format stream is read: its text, and whether it carries a generated token.
One definition for the pipeline's client (`generation.engines.openai_engine`) and the gateway, which
times the streams it passes through, so the two measure TTFT and count tokens alike."""

from __future__ import annotations

from typing import Any


def chunk_text(choice: dict[str, Any], chat: bool) -> str | None:
    if not chat:
        return choice.get("text")
    delta = choice.get("delta") or {}
    return delta.get("content")


def is_token_chunk(choice: dict[str, Any], chat: bool, piece: str | None) -> bool:
    """Whether a stream chunk carries a generated token, whatever its text.

    A token's text may be empty (a special token the server skips, or text the detokenizer holds
    back until a word completes), and vLLM still sends its chunk: timing only the chunks with text
    put TTFT at the first visible character and every other gap at zero (random-weight models on
    a WordPiece vocabulary showed TTFT = E2E). Counted, as vLLM's own benchmark does: text or
    reasoning, or an empty text that neither opens the message (chat's role chunk) nor closes it
    (a bare finish chunk)."""
    if piece:
        return True
    delta = choice.get("delta") or {}
    if chat and (delta.get("reasoning_content") or delta.get("reasoning")):
        return True
    if piece is None or choice.get("finish_reason"):
        return False
    return not (chat and "role" in delta)
