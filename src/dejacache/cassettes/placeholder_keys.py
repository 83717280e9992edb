"""Placeholder API keys for replay, and the guard that keeps them off the wire.

``OpenAI()`` and ``Anthropic()`` refuse to construct without ``OPENAI_API_KEY`` /
``ANTHROPIC_API_KEY``, even when every call they make replays from a cassette, so "no API key
in CI" needed a fake key in every CI config. While tests replay, the pytest plugin sets a
placeholder for each variable that is unset (:func:`supply`) and restores the environment
afterwards.

The same for ``GEMINI_API_KEY`` (``genai.Client()`` refuses to construct without it, or
``GOOGLE_API_KEY``) and AWS's ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``: boto3 signs
even a request dejacache answers, and with no credential anywhere botocore asks the instance
metadata service (169.254.169.254) for one, a call no cassette holds. AWS's are supplied only
when nothing else would give boto3 a credential (no key, profile, credentials file, web
identity or container credentials).

A placeholder must never reach a provider: a live request carrying it would fail with a
confusing 401 at best. :func:`supply` therefore also wraps the public ``HTTPTransport`` /
``AsyncHTTPTransport`` classes of httpx and httpx2 (what the SDKs send through, intercepted or
not) with a check that refuses any request whose headers or URL carry the placeholder, with a
:class:`~dejacache.errors.NetworkBlocked` that says which variable to set; urllib3 (boto3,
requests) and aiohttp requests dejacache sends live are checked the same way
(:func:`check`). Transports that are neither (litellm's own aiohttp) are not checked.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import NetworkBlocked

__all__ = ["EXPLAIN", "KEY_VARIABLES", "PLACEHOLDER", "carrier_of", "carries_placeholder", "check",
           "held", "proxy_refusal", "supply", "withdraw"]

# Not secret-shaped (no ``sk-`` prefix), so ``dejacache scan`` and redaction leave it alone
# and nobody mistakes it for a leaked key.
PLACEHOLDER = "dejacache-replay-placeholder-not-a-key"
KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "AWS_ACCESS_KEY_ID",
                 "AWS_SECRET_ACCESS_KEY")
# What else gives a client its credential: a placeholder would hide it.
_ALSO = {"GEMINI_API_KEY": ("GOOGLE_API_KEY",)}
_AWS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI")

_LIBRARIES = ("httpx", "httpx2")
_LOCK = threading.Lock()
_OUT: set[str] = set()  # the variables holding a placeholder now
_USERS = 0
# (class, method, what was there, our wrapper)
_SAVED: list[tuple[type, str, Callable[..., Any], Callable[..., Any]]] = []


def carries_placeholder(request: Any) -> bool:
    """Whether an httpx/httpx2 request would send the placeholder (a header or the URL)."""
    try:
        values = [v for _, v in request.headers.items()]
        values.append(str(request.url))
    except AttributeError:  # not a request object we know: nothing to check
        return False
    return any(PLACEHOLDER in v for v in values)


#: Asked (innermost last) what a refused request was part of: the pytest plugin names the
#: test, and says whether it has a cassette and whether the call went live on purpose.
#: Each takes the host and the variables to set (as :func:`held` writes them) and returns
#: the advice to give, or None to leave it to the next.
EXPLAIN: list[Callable[[str, str], str | None]] = []


def held() -> str:
    """The variables holding a placeholder now, as a message names them (all it may set
    when none does)."""
    return " / ".join(n for n in KEY_VARIABLES if n in _OUT) or " / ".join(KEY_VARIABLES)


def _carrier(request: Any) -> tuple[str, ...]:
    """The variables the placeholder a request carries came from, by where each SDK sends
    its credential (all placeholders are one text, so the place tells them apart)."""
    return carrier_of(str(request.url), str(request.url.host), request.headers.items())


def proxy_refusal(what: str, url: str, host: str, headers: Iterable[tuple[str, str]]) -> str:
    """Why the proxy refused a live ``what`` (call, WebSocket) carrying the placeholder it
    gave its command, naming the variable the credential's place says it came from (every
    one it sets when the place does not tell)."""
    names = " / ".join(carrier_of(url, host, headers)) or " / ".join(KEY_VARIABLES)
    verb = "were" if " / " in names else "was"
    return (f"this {what} to {host} would go live with the placeholder API key the proxy gave "
            f"its command for replaying ({names} {verb} unset): set the key and record again")


def carrier_of(url: str, host: str, headers: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """:func:`_carrier` of a request given by parts."""
    for name, value in headers:
        if PLACEHOLDER not in value:
            continue
        name = name.lower()
        if name == "x-api-key":
            return ("ANTHROPIC_API_KEY",)
        if name == "x-goog-api-key":
            return ("GEMINI_API_KEY",)
        if name == "authorization" and value.startswith("AWS4-"):
            return _AWS[:2]
        if name == "authorization":  # a bearer token: OpenAI's, or Gemini's OpenAI-style API
            return ("GEMINI_API_KEY",) if host.endswith("googleapis.com") else ("OPENAI_API_KEY",)
    if PLACEHOLDER in url:  # a presigned AWS URL, or Gemini's ?key=
        return _AWS[:2] if "X-Amz-Credential" in url else ("GEMINI_API_KEY",)
    return ()


def _to_set(request: Any) -> str:
    """The variables to set for ``request``: the one it used when dejacache holds it, else
    every one holding a placeholder (a request to an unknown host in an unknown place)."""
    try:
        named = [n for n in _carrier(request) if n in _OUT]
    except AttributeError:  # not a request shape we know
        named = []
    return " / ".join(named) or held()


def check(request: Any) -> None:
    """Refuse ``request`` (an httpx-shaped request about to go live) when it carries the
    placeholder: the check the transports of httpx and httpx2 get, for the other stacks."""
    if _USERS and carries_placeholder(request):
        _refuse(request)


def _refuse(request: Any) -> None:
    host = str(request.url.host)
    keys = _to_set(request)
    advice = None
    for explain in reversed(EXPLAIN):
        advice = explain(host, keys)
        if advice:
            break
    verb = "were" if " / " in keys else "was"
    raise NetworkBlocked(
        f"dejacache refused a live request to {host}: it carries the placeholder credential "
        f"dejacache sets while tests replay ({keys} {verb} unset). "
        + (advice or "A call that misses the cassette needs a real key: set the variable and "
           "re-record locally with --dejacache-mode=record."),
        source=host,
    )


_MARK = "__dejacache_placeholder_guard__"


def _wrap_sync(real: Callable[..., Any]) -> Callable[..., Any]:
    def handle_request(self: Any, request: Any) -> Any:
        if _USERS and carries_placeholder(request):
            _refuse(request)
        return real(self, request)

    setattr(handle_request, _MARK, True)
    return handle_request


def _wrap_async(real: Callable[..., Any]) -> Callable[..., Any]:
    async def handle_async_request(self: Any, request: Any) -> Any:
        if _USERS and carries_placeholder(request):
            _refuse(request)
        return await real(self, request)

    setattr(handle_async_request, _MARK, True)
    return handle_async_request


_Target = tuple[type, str, Callable[[Callable[..., Any]], Callable[..., Any]]]


def _targets_in(module: Any) -> list[_Target]:
    out: list[_Target] = []
    for cls_name, method, wrap in (("HTTPTransport", "handle_request", _wrap_sync),
                                   ("AsyncHTTPTransport", "handle_async_request", _wrap_async)):
        cls = getattr(module, cls_name, None)
        if isinstance(cls, type) and method in cls.__dict__:
            out.append((cls, method, wrap))
    return out


def _loaded(name: str) -> Any:
    """The library ``name`` if this process has imported it (all of it), else None."""
    mod = sys.modules.get(name)
    if mod is None or getattr(getattr(mod, "__spec__", None), "_initializing", False):
        return None
    return mod


def _install_guard() -> bool:
    """Wrap the transports, innermost: under dejacache's interception, so a replayed request
    (which carries the placeholder too) is answered before the check sees it. When
    interception is already on top, the guard cannot go under it: False, and no placeholder.
    A guard left under an interception wrapper when withdrawn stays as a pass-through.
    A library not imported yet is wrapped when it is (``_GuardOnImport``): a replaying session
    whose tests never use httpx or httpx2 does not pay for importing them (~0.1 s)."""
    targets = [t for name in _LIBRARIES if (m := _loaded(name)) is not None
               for t in _targets_in(m)]
    for cls, method, _ in targets:
        current = cls.__dict__[method]
        if getattr(current, "__dejacache_patch__", False):
            return False
    _wrap_targets(targets)
    if not any(isinstance(f, _GuardOnImport) for f in sys.meta_path):
        # After dejacache's other import hooks (interception's, the thread carry): on a
        # library loaded while a block is open, interception's wrapper goes on top of ours.
        at = next((i for i, f in enumerate(sys.meta_path)
                   if not type(f).__module__.startswith("dejacache.")), len(sys.meta_path))
        sys.meta_path.insert(at, _GuardOnImport())
    return True


def _wrap_targets(targets: list[_Target]) -> None:
    for cls, method, wrap in targets:
        current = cls.__dict__[method]
        if getattr(current, _MARK, False) or getattr(current, "__dejacache_patch__", False):
            continue  # ours already, left in place (see above)
        wrapper = wrap(current)
        _SAVED.append((cls, method, current, wrapper))
        setattr(cls, method, wrapper)


class _GuardOnImport:
    """Wraps httpx / httpx2 the moment they are imported while placeholders are out."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in _LIBRARIES or not _USERS or fullname in sys.modules:
            return None
        from .._importhook import spec_with_callback

        return spec_with_callback(self, fullname, path, target, _on_import)


def _on_import(module: Any) -> None:
    with _LOCK:
        if _USERS:
            _wrap_targets(_targets_in(module))


def _remove_guard() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _GuardOnImport)]
    while _SAVED:
        cls, method, real, wrapper = _SAVED.pop()
        # Identity, not the mark: interception's wrapper copies our attributes
        # (functools.update_wrapper), and must not be taken off while its block is open.
        if cls.__dict__.get(method) is wrapper:
            setattr(cls, method, real)


def supply(env: dict[str, str] | None = None,
           names: Iterable[str] = KEY_VARIABLES) -> list[str] | None:
    """Set the placeholder for each unset (or empty) variable; returns the ones it set.

    The first caller also installs the transport guard; :func:`withdraw` undoes both (calls
    nest: the guard stays until the last ``withdraw``). Does nothing and returns None when the
    guard cannot be installed under an interception already in place.
    """
    global _USERS
    target: Any = os.environ if env is None else env
    with _LOCK:
        if _USERS == 0 and not _install_guard():
            return None
        _USERS += 1
    set_here = _unset(target, names)
    for n in set_here:
        target[n] = PLACEHOLDER
    if env is None:
        _OUT.update(set_here)
    return set_here


def _unset(target: Any, names: Iterable[str]) -> list[str]:
    """The variables of ``names`` to hold a placeholder: unset, and nothing else gives the
    client a credential (decided for all before any is set)."""
    aws_given = any(target.get(n) for n in _AWS) or _aws_files(target)
    out = []
    for n in names:
        if target.get(n) or any(target.get(a) for a in _ALSO.get(n, ())):
            continue
        if n.startswith("AWS_") and aws_given:
            continue
        out.append(n)
    return out


def _aws_files(target: Any) -> bool:
    """Whether boto3 would find credentials in a file (~/.aws/credentials or config)."""
    for var, default in (("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"),
                         ("AWS_CONFIG_FILE", "~/.aws/config")):
        if os.path.exists(os.path.expanduser(target.get(var) or default)):
            return True
    return False


def withdraw(set_here: Iterable[str] | None, env: dict[str, str] | None = None) -> None:
    """Undo one :func:`supply` (given what it returned): remove the placeholders it set
    (those still holding the placeholder) and, after the last one, the guard."""
    global _USERS
    if set_here is None:
        return
    target: Any = os.environ if env is None else env
    for n in set_here:
        if target.get(n) == PLACEHOLDER:
            del target[n]
        if env is None and os.environ.get(n) != PLACEHOLDER:
            _OUT.discard(n)
    with _LOCK:
        _USERS = max(0, _USERS - 1)
        if _USERS == 0:
            _remove_guard()
