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
that text, and a form is form-encoded, its credentials as their placeholder).
"""

from __future__ import annotations

import collections
import urllib.parse
from typing import Any

import orjson

__all__ = ["VcrRequest", "VcrView"]


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

    @property
    def uri(self) -> str:
        q = urllib.parse.urlencode(self.query)
        return self.path + (f"?{q}" if q else "")

    url = uri

    def __repr__(self) -> str:
        return f"<Request ({self.method}) {self.uri}>"


def _response(value: Any) -> dict[str, Any]:
    """A stored HTTP answer in vcrpy's response shape."""
    from ..http.exchange import body_bytes

    if not isinstance(value, dict) or "status" not in value:
        return {"status": {"code": None, "message": ""}, "headers": {}, "body": {"string": b""},
                "value": value}
    headers: dict[str, list[str]] = collections.defaultdict(list)
    for k, v in value.get("headers") or []:
        headers[k].append(v)
    return {"status": {"code": value["status"], "message": ""}, "headers": dict(headers),
            "body": {"string": body_bytes(value)}}


class VcrView:
    """vcrpy's ``Cassette`` names over a dejacache cassette (see the module docstring)."""

    def __init__(self, tape: Any) -> None:
        self.tape = tape  #: the dejacache :class:`~.store.Cassette`

    def _docs(self) -> list[dict[str, Any]]:
        """The recorded entries (the file as the block opened it; none in ``record`` mode),
        then the ones this run added, in order."""
        tape = self.tape
        t = tape._tape  # the cassette's own parts: the view reads, never changes them
        with tape._lock:
            old = [] if tape.mode == "record" else [t.doc(e) for e in t.all_entries()]
            new = list(tape._writer.new)
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
        return str(self.tape.path)

    @property
    def record_mode(self) -> str:
        """The dejacache mode (``auto``, ``replay``, ``record``, ``off``)."""
        return str(self.tape.mode)

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
