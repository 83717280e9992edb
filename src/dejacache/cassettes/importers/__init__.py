"""``dejacache import FILE -o CASSETTE``: another tool's recording as a dejacache cassette.

Two sources: a vcrpy / pytest-recording cassette (YAML, or vcrpy's JSON serializer; gzipped
or not; ``interactions``, or the ``requests`` / ``responses`` lists langchain_tests writes)
of HTTP calls, and an agentcassette JSON recording of intercepted function calls. The format is
read from the file's content, not its name.

Nothing here writes cassette bytes itself: the import runs inside a ``dejacache.cassette(out,
mode="record")`` block and hands every call to the code a live call goes through (the HTTP
transport's ``handle_sync`` with the recorded response standing in for the network; the
engine's ``encode_record``/``store_value`` for functions). So keys, id aliasing, the stored
shape and redaction are those of a live recording, and replay hits. A call that cannot be
mapped faithfully is skipped and listed in the report, never written approximately.
"""

from __future__ import annotations

import os
import pathlib
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from ...errors import CassetteError, ConfigurationError
from ..block import cassette
from ..redact import Redactor
from ..scan import scan_text
from ..vcr_match import VCR, check_match
from ._bodies import Unreadable, decode, gzipped
from ._limits import InflateBudget, OverBudget, check_expansion
from .report import Converted, ImportReport, Skipped

__all__ = ["Converted", "ImportReport", "Skipped", "detect_format", "import_file"]


# A dejacache cassette, so "import" of one says what it is instead of "unknown format".
def _is_dejacache(doc: Any) -> bool:
    return isinstance(doc, dict) and "entries" in doc and "format" in doc


def _parse(path: pathlib.Path, raw: bytes) -> tuple[str, Any]:
    """``(format, document)``: "vcr" or "agentcassette"; raises ``CassetteError`` otherwise,
    and for a document past the bounds of ``_limits`` (YAML is measured as it loads). ``raw``
    is the file's content as :func:`_read` gives it (a gzip file inflated)."""
    doc: Any = None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if raw.lstrip()[:1] in (b"{", b"["):  # vcrpy's YAML never starts with a flow node
            raise CassetteError(f"not a readable JSON recording: {exc}", path=path) from None
        from ._yaml import load_yaml

        doc = load_yaml(raw, path)
    else:
        check_expansion(doc, _json_children, _json_weight, len(raw), path)
    if _is_dejacache(doc):
        raise CassetteError("this is already a dejacache cassette; nothing to import",
                            path=path)
    if isinstance(doc, dict) and isinstance(doc.get("interactions"), list):
        return "vcr", doc
    if isinstance(doc, dict) and isinstance(doc.get("requests"), list) \
            and isinstance(doc.get("responses"), list):
        return "vcr", _paired(doc, path)
    if isinstance(doc, dict) and isinstance(doc.get("steps"), list):
        return "agentcassette", doc
    raise CassetteError(
        "unknown recording format: dejacache import reads vcrpy / pytest-recording cassettes "
        "(YAML or JSON with 'interactions', or 'requests' and 'responses' lists; gzipped "
        "or not) and agentcassette recordings (JSON with 'steps')", path=path)


def _paired(doc: dict[str, Any], path: pathlib.Path) -> dict[str, Any]:
    """vcrpy's in-memory layout, two lists side by side, as interactions. langchain_tests'
    serializer (shared by the langchain partner packages) writes it so: the n-th request was
    answered by the n-th response."""
    requests, responses = doc["requests"], doc["responses"]
    if len(requests) != len(responses):
        raise CassetteError(f"not a readable cassette: {len(requests)} requests but "
                            f"{len(responses)} responses", path=path)
    return {"interactions": [{"request": q, "response": r}
                             for q, r in zip(requests, responses, strict=True)]}


def _json_children(value: Any) -> list[Any] | None:
    if isinstance(value, dict):
        return [*value.keys(), *value.values()]
    return value if isinstance(value, list) else None


def _json_weight(value: Any) -> int:
    return 1 + len(value) if isinstance(value, str) else 1


def _match_vcr(dst: pathlib.Path, data: bytes) -> bytes:
    """The cassette just written, its HTTP entries keyed by method + URL (``--match vcr``);
    its new bytes."""
    from .. import format as fmt
    from ..atomic import atomic_write
    from ..document import load_document
    from ..render import render
    from ..vcr_match import rekey_entries

    doc = load_document(data, dst)
    values = doc["values"]
    entries = rekey_entries(doc["entries"], lambda t: fmt.unpack(t, values.__getitem__))
    out = render(entries, values)
    atomic_write(dst, out)
    return out


def detect_format(path: str | os.PathLike[str]) -> str:
    """``"vcr"`` or ``"agentcassette"`` for the file at ``path`` (``CassetteError`` if
    neither)."""
    p = pathlib.Path(path)
    return _parse(p, _read(p))[0]


def _read(p: pathlib.Path) -> bytes:
    """The file's bytes; a gzip file (``.yaml.gz``, ``.json.gz``: suites that compress their
    cassettes) inflated, within the budget a body of its size has (``_limits``)."""
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise CassetteError(f"cannot read the recording to import: {exc.strerror}",
                            path=p) from None
    if not gzipped(raw):
        return raw
    try:
        return decode(raw, ["gzip"], InflateBudget(len(raw)))
    except Unreadable as why:
        raise CassetteError(f"not a readable gzip file: {why}", path=p) from None
    except OverBudget as exc:
        raise CassetteError(f"not a readable cassette: {exc}", path=p) from None


FunctionSpec = Callable[..., Any] | str


def resolve_function(spec: FunctionSpec, name: str) -> Callable[..., Any]:
    """A callable from ``"package.module:attr.path"`` (or the callable itself)."""
    if callable(spec):
        return spec
    mod_name, sep, attr = str(spec).partition(":")
    if not sep or not mod_name or not attr:
        raise ConfigurationError(f"function for {name!r} must be 'module:attribute', "
                                 f"not {spec!r}")
    import importlib

    try:
        obj: Any = importlib.import_module(mod_name)
    except ImportError as exc:
        raise ConfigurationError(f"function for {name!r}: cannot import {mod_name!r} "
                                 f"({exc})") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigurationError(f"function for {name!r}: {mod_name!r} has no "
                                     f"{attr!r}") from None
    if not callable(obj):
        raise ConfigurationError(f"function for {name!r}: {spec!r} is not callable")
    return obj  # type: ignore[no-any-return]


def import_file(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    functions: Mapping[str, FunctionSpec] | None = None,
    cache_key: str | None = None,
    redact: Iterable[str | re.Pattern[str]] = (),
    overwrite: bool = False,
    match: str = "request",
) -> ImportReport:
    """Convert the recording at ``path`` into the dejacache cassette ``out``.

    ``functions`` maps an agentcassette step name to the ``@dejacache.cache`` function that
    makes that call now (a callable or ``"module:attr"``); steps without one are skipped.
    ``cache_key``: the namespace the replaying block uses (``cassette(..., cache_key=)``).
    ``redact``: extra names, paths and patterns, as ``cassette(redact=)`` takes them.
    ``out`` must not exist unless ``overwrite``. ``match="vcr"`` (vcrpy recordings): the
    calls are matched on method + URL in recorded order, as vcrpy matched them, until they
    are re-recorded (``cassettes/vcr_match.py``).
    """
    return run_import(path, out, functions=functions, cache_key=cache_key, redact=redact,
                      overwrite=overwrite, overwrite_hint="overwrite=True", match=match)


def run_import(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    functions: Mapping[str, FunctionSpec] | None,
    cache_key: str | None,
    redact: Iterable[str | re.Pattern[str]],
    overwrite: bool,
    overwrite_hint: str,
    match: str = "request",
) -> ImportReport:
    """:func:`import_file`, for a caller that asks for ``overwrite`` its own way
    (``overwrite_hint``: the CLI's ``--force``), so a refusal names what its user wrote."""
    src = pathlib.Path(path)
    dst = pathlib.Path(out)
    raw = _read(src)
    fmt_name, doc = _parse(src, raw)
    if check_match(match, "match") == VCR and fmt_name != "vcr":
        raise ConfigurationError(f"match='vcr' is for vcrpy recordings; {src} is an "
                                 f"{fmt_name} recording (its calls are matched whole)")
    if dst.exists() and not overwrite:
        raise ConfigurationError(f"{dst} exists; pass {overwrite_hint} to replace it")
    if dst.resolve() == src.resolve():
        raise ConfigurationError(f"the output {dst} is the file being imported")
    fns = {k: resolve_function(v, k) for k, v in (functions or {}).items()}
    report = ImportReport(source=str(src), output=str(dst), format=fmt_name)
    redactor = Redactor.from_spec(tuple(redact))
    kwargs: dict[str, Any] = {} if cache_key is None else {"cache_key": cache_key}
    if fmt_name == "vcr":
        from . import vcr

        lib = vcr.library()
        plan = vcr.read(doc, lib, len(raw), src)  # reads and decodes all, or refuses the file
        with cassette(dst, mode="record", redact=redactor, **kwargs) as tape:
            vcr.record(plan, lib, report, redactor, tape)
            wrote = tape.new_entries
    else:
        from .agentcassette import convert as convert_steps

        with cassette(dst, mode="record", redact=redactor, **kwargs) as tape:
            convert_steps(doc, report, fns, redactor, tape)
            wrote = tape.new_entries
    after = dst.read_bytes() if dst.exists() else None
    report.written = wrote > 0 and after is not None
    if report.written and match == VCR:
        assert after is not None
        after = _match_vcr(dst, after)
        report.match = VCR
    if after is not None:  # one scan, of what will be committed; the redactor wrote it
        report.secrets_in_output = [str(f) for f in scan_text(after.decode("utf-8", "replace"),
                                                              str(dst))]
    return report

