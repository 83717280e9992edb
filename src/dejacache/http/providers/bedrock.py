"""Amazon Bedrock runtime (``bedrock-runtime``) as boto3 / botocore call it.

``POST /model/{modelId}/converse`` (and ``converse-stream``, ``invoke``,
``invoke-with-response-stream``). The model is in the path, percent-encoded
(``anthropic.claude-3-haiku-20240307-v1%3A0``, an ARN's ``/`` as ``%2F``), and the answers
do not repeat it, so each request gets a copy of the provider that knows it (``for_request``)
and the stored answer names it. Streams come as AWS eventstream messages
(``http/eventstream.py``); InvokeModel carries the model vendor's own JSON, and its stream
wraps each of the vendor's events, base64-encoded, in a ``chunk`` event's ``bytes``.

The request's SigV4 headers (``authorization``, ``x-amz-date``, ``x-amz-security-token``,
``x-amz-content-sha256``, ``amz-sdk-invocation-id``, ``amz-sdk-request``) change on every call;
like every request header they are neither keyed nor stored (``exchange.py``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

import orjson

from ..eventstream import stored_type
from ._base import END, FINISHING, IN_PROGRESS, Provider
from .anthropic import PROVIDER as ANTHROPIC

__all__ = ["PROVIDER", "Bedrock", "split_path"]

# Path action -> call name (boto3's operation, snake case).
_ACTIONS = {
    "converse": "bedrock.converse",
    "converse-stream": "bedrock.converse_stream",
    "invoke": "bedrock.invoke_model",
    "invoke-with-response-stream": "bedrock.invoke_model_with_response_stream",
}

_STREAMING = frozenset({"converse-stream", "invoke-with-response-stream"})

# Converse usage field -> the name the rest of dejacache counts (stats, prices, reports).
# As with Anthropic, inputTokens leaves out the tokens read from or written to the prompt
# cache; totalTokens includes them.
_USAGE = {
    "inputTokens": "input_tokens",
    "outputTokens": "output_tokens",
    "totalTokens": "total_tokens",
    "cacheReadInputTokens": "cache_read_input_tokens",
    "cacheWriteInputTokens": "cache_creation_input_tokens",
}

# HTTP status -> the error code an AWS SDK reads from ``x-amzn-ErrorType``.
_ERROR_TYPES = {400: "ValidationException", 403: "AccessDeniedException",
                404: "ResourceNotFoundException", 429: "ThrottlingException",
                500: "InternalServerException", 502: "ServiceUnavailableException",
                503: "ServiceUnavailableException"}

# Headers every botocore request carries (SigV4 and the SDK's retry bookkeeping).
_AWS_HEADER_PREFIXES = ("x-amz-", "amz-sdk-")


def split_path(path: str) -> tuple[str, str] | None:
    """``(model id, action)`` of a ``.../model/{modelId}/{action}`` path, the id
    percent-decoded; None for any other path."""
    at = path.find("/model/")
    if at < 0:
        return None
    model, _, action = path[at + 7:].partition("?")[0].rpartition("/")
    if not model or not action:
        return None
    return unquote(model), action


def _signed_by_aws(headers: Mapping[str, str]) -> bool:
    for name in headers:
        low = name.lower()
        if low.startswith(_AWS_HEADER_PREFIXES):
            return True
        if low == "authorization" and headers[name].startswith("AWS4-"):
            return True
    return False


def _converse_usage(usage: Any) -> dict[str, int]:
    if not isinstance(usage, dict):
        return {}
    return {_USAGE[k]: v for k, v in usage.items() if k in _USAGE and type(v) is int}


def _chunk_event(data: Any) -> Any:
    """The vendor's event inside an InvokeModelWithResponseStream ``chunk`` (its ``bytes``
    are base64 of the event's JSON), or ``data`` itself when it is not one."""
    if isinstance(data, dict):
        raw = data.get("bytes")
        if type(raw) is str:
            try:
                return orjson.loads(base64.b64decode(raw, validate=True))
            except (binascii.Error, orjson.JSONDecodeError):
                return None
    return data


def _stored_payload(event: Any) -> Any:
    payload = event.get("payload") if isinstance(event, dict) else None
    try:
        return orjson.loads(payload) if isinstance(payload, (str, bytes)) else None
    except orjson.JSONDecodeError:
        return None


class Bedrock(Provider):
    name = "bedrock"
    priority = 15
    # Converse's requestMetadata only tags the invocation logs; it never changes the answer.
    volatile = frozenset({"requestMetadata"})
    # Converse: toolUse.toolUseId (fed back as toolResult.toolUseId); InvokeModel with an
    # Anthropic body: the message id and tool_use.id (fed back as tool_result.tool_use_id).
    alias_keys = frozenset({"toolUseId", "id"})
    upstream = "https://bedrock-runtime.{region}.amazonaws.com"

    def __init__(self, model_id: str | None = None) -> None:
        self.model_id = model_id

    def matches(self, host: str, path: str, headers: Mapping[str, str]) -> bool:
        if split_path(path) is None:
            return False
        # The real host is bedrock-runtime.<region>.amazonaws.com (or a VPC endpoint naming
        # it); behind endpoint_url (a proxy, a test server) botocore's own headers tell.
        return "bedrock" in host or _signed_by_aws(headers)

    def error_answer(self, status: int, kind: str, message: str
                     ) -> tuple[dict[str, str], Any]:
        code = _ERROR_TYPES.get(status, "InternalServerException")
        return {"x-amzn-errortype": code}, {"message": message}

    def for_request(self, host: str, path: str) -> Provider:
        parts = split_path(path)
        return Bedrock(parts[0]) if parts is not None else self

    def model(self, body: Any, events: Iterable[Any]) -> str | None:
        return self.model_id

    def asks_stream(self, path: str, body: Any) -> bool:
        # The operation says it, not the body (which never has "stream").
        parts = split_path(path)
        return parts is not None and parts[1] in _STREAMING

    def endpoint(self, host: str, path: str) -> str:
        parts = split_path(path)
        action = parts[1] if parts is not None else "other"
        return _ACTIONS.get(action) or "bedrock." + action.replace("-", "_")

    def stage(self, event: Any) -> int:
        # A stored eventstream event (a dict): ConverseStream's messageStop completes the
        # answer and its metadata event (the usage) ends it; an InvokeModel stream ends with
        # the vendor's own end marker, inside a chunk; an exception message ends any stream.
        kind = stored_type(event)
        if kind is None:
            return IN_PROGRESS
        if kind == "metadata":
            return END
        if kind == "messageStop":
            return FINISHING
        if kind == "chunk":
            inner = _chunk_event(_stored_payload(event))
            t = inner.get("type") if isinstance(inner, dict) else None
            return END if t == "message_stop" else FINISHING if t == "message_delta" \
                else IN_PROGRESS
        return END if _is_exception(event) else IN_PROGRESS

    def usage(self, body: Any, events: Iterable[Any]) -> dict[str, int] | None:
        out: dict[str, int] = {}
        if isinstance(body, dict):
            usage = body.get("usage")
            # Converse (and Nova's InvokeModel body) name counts in camelCase; an Anthropic
            # InvokeModel body already uses Anthropic's names.
            out.update(_converse_usage(usage) or ANTHROPIC.usage(body, ()) or {})
        inner: list[Any] = []
        metrics: dict[str, int] = {}
        for ev in events:
            if not isinstance(ev, dict):
                continue
            if "usage" in ev and "bytes" not in ev:  # ConverseStream's metadata event
                out.update(_converse_usage(ev["usage"]))
                continue
            data = _chunk_event(ev)
            if isinstance(data, dict):
                inner.append(data)
                m = data.get("amazon-bedrock-invocationMetrics")
                if isinstance(m, dict):
                    metrics = {k: v for k, v in (("input_tokens", m.get("inputTokenCount")),
                                                 ("output_tokens", m.get("outputTokenCount")))
                               if type(v) is int}
        if inner:
            # The vendor's own stream events first (Anthropic: message_start, message_delta);
            # Bedrock's invocation metrics when the vendor reports none.
            out.update(ANTHROPIC.usage(None, inner) or metrics)
        return out or None

    def event_for_ids(self, event: Any) -> Any:
        return _chunk_event(event)


def _is_exception(event: Any) -> bool:
    for h in event.get("headers") or ():
        if isinstance(h, list) and len(h) == 2 and h[0] == ":message-type":
            return h[1] in ("exception", "error")
    return False


PROVIDER = Bedrock()
