"""A cassette seen the way vcrpy's ``Cassette`` is: for tests that introspect it.

pytest-recording's ``vcr`` fixture and pytest-vcr's ``vcr_cassette`` hand a test vcrpy's
cassette, and suites assert on it: ``play_count``, ``all_played``, ``requests[0].body``,
``len(cassette)``. :class:`VcrView` answers the same names from a dejacache
:class:`~.store.Cassette`, so those tests run unchanged (the pytest plugin offers it under
both fixture names when neither plugin is installed).

What differs, because dejacache stores less: of the request headers, only those keyed as they
are (``Accept``, API versions) are stored, so ``headers`` holds those; credentials never are
(they are keyed as digests); hosts are not stored (a loopback server gets a fresh
port per run), so ``uri`` is the path and query; ``body`` is the canonical request body as
JSON bytes (volatile fields left out), not the bytes the client sent (a body kept as text is
that text, and a form is form-encoded, its credentials as their placeholder). A JSON body's
``headers`` say ``content-type: application/json`` when the key held no Content-Type (imported
recordings are keyed without request headers): the client sent it, and a suite's serializer
reads it to tell a JSON body.

``record_mode`` is in vcrpy's vocabulary (``none``, ``once``, ``new_episodes``, ``all``), as
suites compare it with ``vcr.record_mode.RecordMode``. ``path`` is the dejacache cassette;
``_path``, which vcrpy keeps for the file it reads, is a file in vcrpy's layout holding what
the cassette holds (written when first asked for, by the pytest plugin through the suite's own
serializer), so a suite's check that reads its cassette file checks these calls. Any other
name is an ``AttributeError`` that says so, never a silent ``None``.
"""

from __future__ import annotations

import collections
import pathlib
import tempfile
import urllib.parse
from collections.abc import Callable
from typing import Any, Final

import orjson

from .._core.modes import VCR_MODES

__all__ = ["VCR_MODES", "VcrRequest", "VcrView", "vcr_document", "vcr_mode_name"]

# vcrpy's record modes (VCR_MODES), as pytest-recording's ``--record-mode`` takes them
# (``rewrite``: pytest-recording's own, the cassette removed first), live in ``_core.modes``: the
# pytest plugin reads them in every run without loading this module.
# A dejacache mode in vcrpy's words: ``replay`` plays and never records (``none``); ``auto``
# plays what it has and records the rest (``new_episodes``); ``record`` and ``off`` send every
# call to the network (``all``).
_AS_VCR: Final = {"replay": "none", "auto": "new_episodes", "record": "all", "off": "all"}


# The shapes a stored body that was not JSON takes (``http/bodies.py``).
_NOT_JSON: Final = ({"text"}, {"form"}, {"multipart"}, {"xxh3_128", "size"})


def vcr_mode_name(mode: str) -> str:
    """A dejacache mode as vcrpy's ``record_mode`` names it."""
    return _AS_VCR.get(mode, mode)


class VcrRequest:
    """A recorded request with vcrpy's ``Request`` attribute names."""

    __slots__ = ("body", "headers", "method", "name", "path", "query")

    def __init__(self, name: str, request: Any) -> None:
        req = request if isinstance(request, dict) else {}
        self.name = name  #: the dejacache call name (``openai.chat.completions``)
        self.method = str(req.get("method", "")).upper()
        self.path = str(req.get("path", ""))
        pairs: list[tuple[str, str]] = []
        for k, v in (req.get("query") or {}).items():
            pairs += [(k, str(x)) for x in (v if isinstance(v, list) else [v])]
        self.query = sorted(pairs)
        body = req.get("body")
        if body is None:
            self.body: bytes | None = None
        elif isinstance(body, dict) and set(body) == {"text"}:
            self.body = str(body["text"]).encode()
        elif isinstance(body, dict) and set(body) == {"form"} and isinstance(body["form"], list):
            # A form as its client sent it (credentials as their placeholder), as vcrpy shows
            # one: ``b"grant_type=client_credentials&..."``.
            self.body = urllib.parse.urlencode(
                [(k, str(v)) for pair in body["form"] if isinstance(pair, dict)
                 for k, v in pair.items()]).encode()
        else:
            self.body = orjson.dumps(body)
        heads = req.get("headers")
        # Only what the key held as it is: credentials are never stored.
        self.headers: dict[str, str] = dict(heads) if isinstance(heads, dict) else {}
        json_body = isinstance(body, list) or (
            isinstance(body, dict) and set(body) not in _NOT_JSON)
        if json_body and not any(k.lower() == "content-type" for k in self.headers):
            self.headers["content-type"] = "application/json"

    @property
    def uri(self) -> str:
        q = urllib.parse.urlencode(self.query)
        return self.path + (f"?{q}" if q else "")

    url = uri

    def __repr__(self) -> str:
        return f"<Request ({self.method}) {self.uri}>"


def _response(value: Any) -> dict[str, Any]:
    """A stored HTTP answer in vcrpy's response shape."""
    from .._tags import from_tree
    from ..http.exchange import body_bytes

    if isinstance(value, dict) and isinstance(value.get("bytes"), dict):
        value = dict(value, bytes=from_tree(value["bytes"]))  # a binary body, type-tagged
    if not isinstance(value, dict) or "status" not in value:
        return {"status": {"code": None, "message": ""}, "headers": {}, "body": {"string": b""},
                "value": value}
    headers: dict[str, list[str]] = collections.defaultdict(list)
    for k, v in value.get("headers") or []:
        headers[k].append(v)
    return {"status": {"code": value["status"], "message": ""}, "headers": dict(headers),
            "body": {"string": body_bytes(value)}}


class VcrView:
    """vcrpy's ``Cassette`` names over a dejacache cassette (see the module docstring).
    ``record_mode``: the vcrpy mode the test asked for (None: the block's mode, named as
    vcrpy would); ``export``: writes the file ``_path`` names (None: vcrpy's layout as JSON,
    in a temporary directory)."""

    # Read by suites' checks (pydantic-ai's "every interaction played" and prompt-cache
    # prefix checks), each answered from the cassette; anything else is not guessed at.
    KNOWN: Final = ("all_played", "data", "dirty", "path", "_path", "play_count",
                    "play_counts", "record_mode", "requests", "responses", "rewound",
                    "write_protected", "allow_playback_repeats")

    def __init__(self, tape: Any, *, record_mode: str | None = None,
                 export: Callable[[VcrView], pathlib.Path] | None = None) -> None:
        self.tape = tape  #: the dejacache :class:`~.store.Cassette`
        self._record_mode = record_mode
        self._export = export
        self._exported: pathlib.Path | None = None

    def _docs(self) -> list[dict[str, Any]]:
        """The recorded entries (the file as the block opened it; none in ``record`` mode),
        then the ones this run added, in order."""
        tape = self.tape
        t = tape._tape  # the cassette's own parts: the view reads, never changes them
        with tape._lock:
            old = [] if tape.mode == "record" else [t.doc(e) for e in t.all_entries()]
            new = list(tape._new)
            return [dict(d, request=t.expand(d.get("request")),
                         response=t.expand(d.get("response"))) for d in [*old, *new]]

    @property
    def data(self) -> list[tuple[VcrRequest, dict[str, Any]]]:
        return [(VcrRequest(str(d.get("name", "")), d.get("request")),
                 _response(d.get("response"))) for d in self._docs()]

    @property
    def requests(self) -> list[VcrRequest]:
        return [VcrRequest(str(d.get("name", "")), d.get("request")) for d in self._docs()]

    @property
    def responses(self) -> list[dict[str, Any]]:
        return [_response(d.get("response")) for d in self._docs()]

    @property
    def play_counts(self) -> collections.Counter[int]:
        """How often each recorded entry (by position) was played: once at most."""
        return collections.Counter(c.recorded_step for c in self.tape.calls
                                   if c.outcome == "replayed" and c.recorded_step is not None)

    @property
    def play_count(self) -> int:
        return sum(self.play_counts.values())

    @property
    def all_played(self) -> bool:
        """Every recorded entry was played (vcrpy: ``len(play_counts) == len(cassette)``)."""
        return len(self.play_counts) == len(self)

    @property
    def path(self) -> str:
        """The dejacache cassette's path."""
        return str(self.tape.path)

    @property
    def _path(self) -> str:
        """A file in vcrpy's layout with this cassette's calls (see the module docstring);
        written again when asked for after the test recorded more."""
        if self._exported is None or self.dirty:
            self._exported = (self._export or _default_export)(self)
        return str(self._exported)

    @property
    def record_mode(self) -> str:
        """vcrpy's name for the mode: the one the test asked for, else the block's
        (``replay`` is ``none``, ``auto`` ``new_episodes``, ``record`` ``all``)."""
        return self._record_mode or vcr_mode_name(str(self.tape.mode))

    @property
    def allow_playback_repeats(self) -> bool:
        return False  # each recording answers once

    @property
    def write_protected(self) -> bool:
        return bool(self.tape.mode == "replay")

    @property
    def rewound(self) -> bool:
        return bool(self.tape.exists)

    @property
    def dirty(self) -> bool:
        return bool(self.tape.new_entries)

    def __len__(self) -> int:
        return len(self._docs())

    def __str__(self) -> str:
        return f"<Cassette containing {len(self)} recorded response(s)>"

    def __getattr__(self, name: str) -> Any:
        # Only for names not found: vcrpy's other attributes are not kept here, and a
        # stand-in that answered None would switch a suite's check off without a word.
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"the vcr fixture is dejacache's stand-in for vcrpy's Cassette and has no "
            f"{name!r}; it answers {', '.join(self.KNOWN)} (docs: migrating-from-vcrpy.md)")


def vcr_document(view: VcrView) -> dict[str, Any]:
    """The cassette's calls in vcrpy's own layout (``interactions`` of request and response,
    ``version: 1``), bodies as text where they are text."""
    out = []
    for req, resp in view.data:
        body = req.body.decode("utf-8", "replace") if req.body is not None else None
        string = resp["body"]["string"]
        try:
            text: Any = string.decode()
        except UnicodeDecodeError:
            text = string
        out.append({
            "request": {"method": req.method, "uri": req.uri, "body": body,
                        "headers": {k: [v] for k, v in req.headers.items()}},
            "response": {"status": resp["status"], "headers": resp["headers"],
                         "body": {"string": text}},
        })
    return {"interactions": out, "version": 1}


def _default_export(view: VcrView) -> pathlib.Path:
    """vcrpy's layout as JSON (which YAML readers read too), in a temporary directory."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="dejacache-vcr-")) / (
        pathlib.Path(view.path).stem + ".yaml")
    if view.tape.exists or view.dirty:
        path.write_bytes(orjson.dumps(vcr_document(view), default=_text_or_b64))
    return path


def _text_or_b64(value: Any) -> Any:
    if isinstance(value, bytes):
        import base64

        return base64.b64encode(value).decode()
    raise TypeError(type(value).__name__)
