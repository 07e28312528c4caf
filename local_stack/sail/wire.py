"""The Responses API bodies, as `sail.SailTokenCompleter` reads them.

Plain dicts from plain values: the envelope every answer shares, the states a response
passes through (queued, in_progress, then completed, incomplete, failed or expired), and
the one assistant message with its token ids and logprobs.
"""

from __future__ import annotations

from typing import Any


def envelope(
    response_id: str, created_at: float, model: str, metadata: dict[str, str]
) -> dict[str, Any]:
    """The fields every state of one response shares; `status` is set by the callers below."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(created_at),
        "model": model,
        "metadata": metadata,
        "output": [],
        "error": None,
        "incomplete_details": None,
    }


def pending(base: dict[str, Any], status: str) -> dict[str, Any]:
    """`queued` (the answer to a background create) or `in_progress`."""
    return {**base, "status": status}


def ended_without_output(base: dict[str, Any], status: str, code: str, message: str) -> dict:
    """`failed` or `expired`, with the reason."""
    return {**base, "status": status, "error": {"code": code, "message": message}}


def finished(
    base: dict[str, Any],
    *,
    text: str,
    token_ids: list[int],
    logprobs: list[float] | None,
    stop_reason: str,
    input_tokens: int,
) -> dict[str, Any]:
    """`completed` (stopped at a stop id) or `incomplete` (hit max_output_tokens)."""
    block: dict[str, Any] = {
        "type": "output_text",
        "text": text,
        "annotations": [],
        "token_ids": token_ids,
        "stop_reason": stop_reason,
    }
    if logprobs is not None:
        block["logprobs"] = [
            {"token_id": token, "logprob": logprob}
            for token, logprob in zip(token_ids, logprobs, strict=True)
        ]
    message = {
        "type": "message",
        "id": f"msg_{base['id'].removeprefix('resp_')}",
        "role": "assistant",
        "status": "completed",
        "content": [block],
    }
    body = {
        **base,
        "output": [message],
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": len(token_ids),
            "total_tokens": input_tokens + len(token_ids),
        },
    }
    if stop_reason == "length":
        reason = {"reason": "max_output_tokens"}
        return {**body, "status": "incomplete", "incomplete_details": reason}
    return {**body, "status": "completed"}
