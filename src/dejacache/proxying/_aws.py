"""AWS requests through the proxy: signed again with the proxy's own credentials.

An AWS SDK pointed at the proxy (``endpoint_url``) signs its request with SigV4 for the
proxy's host, so the signature cannot be sent on. The proxy keeps the service and region the
client signed for (its ``Authorization`` header's credential scope), drops the client's
signature headers and signs the upstream request with the credentials botocore finds in the
proxy's environment (variables, profile, instance role). The client may then hold any
credentials at all (a test's placeholders); the proxy's are never keyed or stored: the key
and the cassette are made from the client's request, before it is signed again.

botocore is optional (``pip install 'dejacache[bedrock]'``) and imported on the first signed
request only.
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Iterable
from typing import Any

from ..errors import ConfigurationError

__all__ = ["Resigner", "signed_scope"]

_SCOPE = re.compile(r"AWS4-HMAC-SHA256\s+Credential=[^/,\s]+/\d{8}/([a-z0-9-]+)/([a-z0-9.-]+)/"
                    r"aws4_request")
# What the client's signature consists of: replaced, never sent on.
_SIGNING = frozenset({"authorization", "x-amz-date", "x-amz-security-token",
                      "x-amz-content-sha256", "host"})


def signed_scope(headers: Iterable[tuple[str, str]]) -> tuple[str, str] | None:
    """(region, service) a SigV4-signed request was signed for; None when it is not."""
    for name, value in headers:
        if name.lower() == "authorization":
            m = _SCOPE.match(value.strip())
            return (m.group(1), m.group(2)) if m else None
    return None


class Resigner:
    """Signs requests with the proxy's credentials (loaded once; botocore refreshes
    temporary ones itself)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._credentials: Any = None

    def _botocore(self) -> Any:
        try:
            for part in ("auth", "awsrequest", "session"):
                importlib.import_module(f"botocore.{part}")
        except ImportError:
            raise ConfigurationError(
                "dejacache proxy re-signs AWS requests with botocore, which is not installed: "
                "pip install 'dejacache[bedrock]'") from None
        return importlib.import_module("botocore")

    def credentials(self) -> Any:
        with self._lock:
            if self._credentials is None:
                botocore = self._botocore()
                creds = botocore.session.Session().get_credentials()
                if creds is None:
                    raise ConfigurationError(
                        "dejacache proxy found no AWS credentials to sign the upstream request "
                        "with (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, a profile, or a role "
                        "in the proxy's environment)")
                self._credentials = creds
            return self._credentials

    def sign(self, method: str, url: str, headers: Iterable[tuple[str, str]], body: bytes,
             region: str, service: str) -> list[tuple[str, str]]:
        """``headers`` without the client's signature, signed for ``url`` anew."""
        creds = self.credentials()
        botocore = self._botocore()
        kept = [(k, v) for k, v in headers if k.lower() not in _SIGNING]
        req = botocore.awsrequest.AWSRequest(method=method, url=url, data=body,
                                             headers=dict(kept))
        botocore.auth.SigV4Auth(creds.get_frozen_credentials(), service, region).add_auth(req)
        return [(k, v if isinstance(v, str) else v.decode()) for k, v in req.headers.items()]
