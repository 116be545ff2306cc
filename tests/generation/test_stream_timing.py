"""Which streamed chunks are tokens: a token whose text is empty (a special token the server skips,
text the detokenizer holds back) still marks the time a token arrived; chat's opening role chunk
and a bare closing finish chunk do not."""

import asyncio
import json

import httpx
from routeforge.generation.engines.openai_engine import stream_completion


def _sse(chunks):
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return httpx.MockTransport(lambda request: httpx.Response(200, text=body,
                                                              headers={"content-type": "text/event-stream"}))


def _stream(chunks, body):
    async def go():
        async with httpx.AsyncClient(transport=_sse(chunks)) as client:
            return await stream_completion(client, "http://server/v1/completions", body)
    return asyncio.run(go())


def test_completion_tokens_with_empty_text_are_timed():
    chunks = [{"choices": [{"text": ""}]}, {"choices": [{"text": " a"}]}, {"choices": [{"text": ""}]},
              {"choices": [{"text": "b"}]}, {"choices": [{"text": "", "finish_reason": "length"}]},
              {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}]
    result = _stream(chunks, {"model": "m", "prompt": "p", "stream": True})
    assert len(result.token_times_s) == 4  # the bare finish chunk is not a token
    assert result.ttft_s == result.token_times_s[0]  # the first token, though its text was empty
    assert result.text == " ab" and result.output_tokens == 4 and result.finish_reason == "length"


def test_chat_role_chunk_is_not_a_token_and_reasoning_is():
    chunks = [{"choices": [{"delta": {"role": "assistant", "content": ""}}]},
              {"choices": [{"delta": {"reasoning_content": "think"}}]},
              {"choices": [{"delta": {"content": ""}}]},
              {"choices": [{"delta": {"content": "hi"}, "finish_reason": "stop"}]}]
    result = _stream(chunks, {"model": "m", "messages": [{"role": "user", "content": "p"}], "stream": True})
    assert len(result.token_times_s) == 3 and result.text == "hi" and result.finish_reason == "stop"
