"""``PickleCodec``: values JSON cannot hold, pickled and HMAC-signed, for those who opt in.

Apart from ``codec.py`` (which serves it as ``dejacache.codec.PickleCodec``): only a process
that configures it loads it, with ``pickle``, ``hmac`` and ``hashlib`` (OpenSSL's
``_hashlib``), which are imported where it signs and loads. 4 KB of bytecode a JSON-only
process never reads.
"""

from __future__ import annotations

import os
from _operator import _compare_digest as compare_digest  # hmac's, without OpenSSL
from typing import Any

from .codec import CODEC_VERSION, HEAD, MAGIC
from .errors import ConfigurationError, IntegrityError, SerializationError

__all__ = ["PickleCodec"]


class PickleCodec:
    """Opt-in pickle for values JSON cannot hold, HMAC-SHA256-signed over key, namespace
    and schema version; unsigned or mis-signed blobs are refused before unpickling.

    ``secret`` (bytes or str) may also come from ``DEJACACHE_PICKLE_SECRET``.
    """

    name = "pickle"

    def __init__(self, secret: bytes | str | None = None) -> None:
        secret = secret if secret is not None else os.environ.get("DEJACACHE_PICKLE_SECRET")
        if not secret:
            raise ConfigurationError(
                "PickleCodec needs a secret (argument or DEJACACHE_PICKLE_SECRET): unsigned "
                "pickle in a shared cache is remote code execution"
            )
        self._secret = secret.encode() if isinstance(secret, str) else bytes(secret)

    def _sign(self, key: str, namespace: str, payload: bytes | memoryview) -> bytes:
        import hashlib
        import hmac

        mac = hmac.new(self._secret, digestmod=hashlib.sha256)
        mac.update(f"dejacache-pickle/{CODEC_VERSION}\x00{namespace}\x00{key}\x00".encode())
        mac.update(payload)
        return mac.digest()

    def encode(self, value: Any, *, key: str = "", namespace: str = "") -> bytes:
        try:
            import pickle  # opt-in only: not paid by ``import dejacache``

            payload = pickle.dumps(value, protocol=5)
        except Exception as exc:
            raise SerializationError(f"cannot pickle value: {exc}", key=key) from None
        head = MAGIC + bytes((CODEC_VERSION,)) + b"P"
        return head + self._sign(key, namespace, payload) + payload

    def decode(self, data: bytes, *, key: str = "", namespace: str = "") -> Any:
        if data[:2] != MAGIC or data[3:4] != b"P" or len(data) < HEAD + 32:
            raise IntegrityError("stored value is not a signed pickle; refused", key=key)
        if data[2] != CODEC_VERSION:
            raise IntegrityError(f"unsupported codec version {data[2]}", key=key)
        payload = memoryview(data)[HEAD + 32 :]
        if not compare_digest(self._sign(key, namespace, payload), data[HEAD : HEAD + 32]):
            raise IntegrityError("pickle signature mismatch; refused", key=key)
        import pickle

        return pickle.loads(payload)
