"""Credentials inside form-encoded and multipart text, found where they sit in a string.

HTTP keys parse form and multipart bodies into fields (``http/bodies.py``), so a credential
field is masked by name like a JSON body's. Text can still hold one: a body keyed before
bodies were parsed (``{"text": "grant_type=...&client_secret=..."}``), a form-encoded answer
(GitHub's classic OAuth token endpoint answers ``access_token=...&scope=...``), a file written
by another tool. Here are the rules that find the values in such text, used by masking
(stores and cassettes, through ``_secrets.mask_text``) and by ``dejacache scan`` (which also
reads ``name=value`` pairs inside longer lines: a URL's query, a YAML body):

- **form text**: a whole string shaped like ``name=value&name=value`` (no whitespace, every
  part has a name and a ``=``); a credential name's value is replaced in place (never
  re-encoded), and so is nothing else.
- **multipart text**: each ``Content-Disposition: form-data; name="..."`` part whose name is a
  credential has its content, up to the next delimiter line, replaced.
- **credential lines** of a request's text body (``http/bodies.py``): a line that is all
  ``name: value`` or ``name = value`` (a config, an ``.env``'s ``export NAME=value``, YAML
  sent as text) under a credential name has its value replaced. Whole lines only: prose
  (``the password: is ...``) and code (``f(password=pw)``) are not such lines.

Which names are credentials is the caller's predicate (``_secrets`` owns that list): this module
imports nothing from dejacache, so ``_secrets`` can use it.

Every search here is linear in its input (``tests/test_secrets.py`` times them at 1 MB): a
search that fails ends the loop rather than restart further on, and the scan-side searches
look only inside a bounded window after each anchor.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator

__all__ = ["SKIP_VALUES", "form_spans", "hinted", "line_values", "mask_form", "mask_lines",
           "mask_multipart", "may_hold_multipart", "multipart_fields", "pair_fields"]


@functools.cache
def _rx(pattern: str) -> re.Pattern[str]:
    # Compiled when first used: a process that never reads form text pays nothing at import.
    return re.compile(pattern)


#: Values that already stand for a credential: masked again they would only nest.
SKIP_VALUES = ("<REDACTED>", "<secret:")

# A form's first name is short: a long run before the first ``=`` is base64 (a data URL, an
# image), and its name must not be asked about (nor kept in a name cache).
_NAME_MAX = 256
_NOT_FORM = r'[\s"]'


def form_spans(s: str) -> list[tuple[int, int, int]] | None:
    """``(start, eq, end)`` of each ``name=value`` when the whole of ``s`` is form-encoded
    (a leading ``?`` and one trailing line break allowed), else None."""
    end = len(s)
    if s.endswith("\r\n"):
        end -= 2
    elif s.endswith("\n"):
        end -= 1
    start = 1 if s.startswith("?") else 0
    eq = s.find("=", start, end)
    if eq <= start or eq - start > _NAME_MAX or _rx(_NOT_FORM).search(s, start, end) is not None:
        return None
    spans = []
    pos = start
    while pos <= end:
        amp = s.find("&", pos, end)
        stop = end if amp < 0 else amp
        eq = s.find("=", pos, stop)
        if eq <= pos:  # an empty part, a part without ``=``, or without a name
            return None
        spans.append((pos, eq, stop))
        pos = stop + 1
    return spans


def mask_form(s: str, replace: Callable[[str], str], secret: Callable[[str], bool]) -> str:
    """``s`` with each credential value passed through ``replace`` (``secret`` is asked about
    each raw name): every pair of a whole form-encoded string, and each pair that ``scan``
    would report (in a form with a space, an empty part or a quote in it, in a line of text,
    in a URL whose path a whole-form reading takes for the first name: ``/cb?code=...``)."""
    # The scanner's pair rule finds what ``scan`` would flag, so a file that ``scan`` passes
    # is one masking wrote. Where both readings find a value, the one starting first wins,
    # and of two at one name the longer (a whole form's value may hold a ``'``).
    spans = sorted([*(form_spans(s) or ()), *_pair_spans(s, secret)],
                   key=lambda span: (span[0], -span[2]))
    out: list[str] = []
    pos = 0
    for start, eq, end in spans:
        value = s[eq + 1:end]
        if start >= pos and value and not value.startswith(SKIP_VALUES) and secret(s[start:eq]):
            out += (s[pos:eq + 1], replace(value))
            pos = end
    if not out:
        return s
    out.append(s[pos:])
    return "".join(out)


# ``name="..."`` in a part's Content-Disposition header (raw text, or as a JSON file writes it),
# or ``name=...`` unquoted; in any case, as servers read it (RFC 6266: the type and parameter
# names are case-insensitive). Group 1 or 2 is the name: see ``_field_name``.
_MP_NAME = (r'(?i)form-data;[^\r\n]{0,200}?\bname='
            r'(?:\\?"([^"\\\r\n]{1,64})\\?"|([^\s"\\;]{1,64}))')


def may_hold_multipart(s: str) -> bool:
    """Whether ``s`` holds ``form-data`` in any case: the check before ``mask_multipart``."""
    if "form-data" in s:
        return True
    # Other spellings (``Form-Data``) looked at only where ``-d`` or ``-D`` is: a lower-case
    # copy of the whole text cost 5x the plain ``in`` above on 20 KB of prose.
    for probe in ("-d", "-D"):
        i = s.find(probe, 4)
        while i >= 0:
            if s[i - 4:i + 5].lower() == "form-data":
                return True
            i = s.find(probe, i + 2)
    return False


def _field_name(m: re.Match[str]) -> str:
    return m.group(1) or m.group(2)
_BLANK = r"\r?\n\r?\n"
_DELIM = r"\r?\n--"
# How far a part's header block may reach: real ones are a few hundred bytes.
_HEAD_MAX = 2048


def mask_multipart(s: str, replace: Callable[[str], str],
                   secret: Callable[[str], bool]) -> str:
    """``s`` with the content of each multipart part whose field name is a credential passed
    through ``replace``: from the blank line after the part's headers to the next line
    starting with its delimiter (the line before the headers), or to the end of ``s``."""
    out: list[str] = []
    pos = 0  # where the text not yet copied to ``out`` starts
    done = 0  # the end of the last part looked at: a match before it is inside that part
    for m in _rx(_MP_NAME).finditer(s):
        if m.start() < done or not secret(_field_name(m)):
            continue
        blank = _rx(_BLANK).search(s, m.end(), m.end() + _HEAD_MAX)
        if blank is None:
            continue
        start = blank.end()
        done = _content_end(s, start, _delimiter(s, m.start()))
        value = s[start:done]
        if value and not value.startswith(SKIP_VALUES):
            out += (s[pos:start], replace(value))
            pos = done
        if done >= len(s):
            break
    if not out:
        return s
    out.append(s[pos:])
    return "".join(out)


def _content_end(s: str, start: int, delim: str | None) -> int:
    """Where the part content starting at ``start`` ends: before the line break of the next
    ``delim`` line (any line starting with ``--`` when the delimiter is unknown)."""
    if delim is None:
        nxt = _rx(_DELIM).search(s, start)
        return len(s) if nxt is None else nxt.start()
    end = s.find("\n" + delim, start)
    if end < 0:
        return len(s)
    return end - 1 if s[end - 1:end] == "\r" else end


def _delimiter(s: str, at: int) -> str | None:
    """The delimiter line (``--boundary``) that opened the part whose header is at ``at``:
    the nearest line before it that starts with ``--``, looked for only a header block back."""
    i = s.rfind("\n--", max(0, at - _HEAD_MAX), at)
    if i < 0:
        if not s.startswith("--") or at > _HEAD_MAX:
            return None
        i = -1
    line_end = s.find("\n", i + 1, at + 1)
    line = s[i + 1:line_end if line_end >= 0 else at].rstrip("\r")
    return line if len(line) > 2 else None


# ---------------------------------------------------------------- in files (``scan``)

# ``name=value`` where a query string, a form body or a JSON string starts, after a JSON escape
# (``\\n``) or a space, ending where the value ends (``f(password=pw())`` in code is not one).
# Read from each ``=`` (a regex starting with the boundary tried every position of every line:
# 3.5x the whole scan of a 1.8 MB cassette of URLs): the name backwards, over a reversed
# window, the value forwards.
_NAME_REVERSED = r"[A-Za-z0-9_.\-%\[\]]{1,64}"
_PAIR_VALUE = r"[A-Za-z0-9_\-.~%+/=!*@$,:]+"
_PAIR_NAME_MAX = 64  # _NAME_REVERSED's bound
_BEFORE = frozenset("?&#\"'") | frozenset(" \t\r\n\x0b\x0c")  # where a name may start
# (``#``: a URL fragment's parameters, ``#access_token=...`` in OAuth's implicit flow)
_AFTER = frozenset("&\"'#\\") | frozenset(" \t\r\n\x0b\x0c")  # where a value may end
_VALUE = r"[ \t]*((?:[^\r\n\"\\]|\\(?![rn]))*)"
_BLANK_ANY = r"(?:\r?\n|\\r\\n|\\n)[ \t]*(?:\r?\n|\\r\\n|\\n)"
_VALUE_MAX = 512


def pair_fields(line: str, secret: Callable[[str], bool],
                hints: tuple[str, ...] = ()) -> Iterator[tuple[str, str]]:
    """``(name, value)`` of each credential ``name=value`` in a line of a file. ``hints``:
    substrings (lower case) of every name ``secret`` accepts; a line holding none is skipped
    (most ``=`` in a cassette are in URLs and text: reading each cost 3x the whole scan)."""
    if hints and not hinted(line, hints):
        return
    for start, eq, end in _pair_spans(line, secret):
        yield line[start:eq], line[eq + 1:end]


def hinted(text: str, hints: tuple[str, ...]) -> bool:
    """Whether ``text``, in lower case, holds one of ``hints``."""
    low = text.lower()
    return any(h in low for h in hints)


def _pair_spans(text: str, secret: Callable[[str], bool]) -> Iterator[tuple[int, int, int]]:
    """``(start, eq, end)`` of each credential ``name=value`` in ``text`` (see ``_pair_at``):
    the one rule both ``scan`` and masking read pairs by."""
    name_rx, value_rx = _rx(_NAME_REVERSED), _rx(_PAIR_VALUE)
    eq = text.find("=")
    while eq >= 0:
        start, end = _pair_at(text, eq, name_rx, value_rx)
        if start >= 0 and secret(text[start:eq]):
            yield start, eq, end
        eq = text.find("=", end)


def _pair_at(line: str, eq: int, name_rx: re.Pattern[str], value_rx: re.Pattern[str]
             ) -> tuple[int, int]:
    """Where the pair whose ``=`` is at ``eq`` starts (-1 when the text there is not one: see
    ``_BEFORE``, ``_AFTER``) and where its value ends, which is where to look for the next
    ``=``: a ``=`` inside the value would end it at the same place (each character is read a
    bounded number of times)."""
    window = line[max(0, eq - _PAIR_NAME_MAX - 1):eq][::-1]
    n = name_rx.match(window)
    if n is None:
        return -1, eq + 1
    start = eq - n.end()
    if start and line[start - 1] == "\\" and line[start] in "nrt":
        start += 1  # ``\npassword=`` in a JSON file: the name starts after the escape
    before = line[start - 1] if start else ""
    if not ("a" <= line[start].lower() <= "z") or (
            start and before not in _BEFORE and not (
                before in "nrt" and line[start - 2:start - 1] == "\\")):
        return -1, eq + 1
    v = value_rx.match(line, eq + 1)
    if v is None:
        return -1, eq + 1
    if v.end() < len(line) and line[v.end()] not in _AFTER:
        return -1, v.end()
    # After a space, only a form's first pair (``body: client_secret=...&...`` in YAML):
    # ``f(x, api_key=key)`` and ``key=key`` on a line of code are not forms. A line break
    # starts a line, as the start of the text does (``scan`` reads line by line).
    if before.isspace() and before not in "\r\n" and not line.startswith("&", v.end()):
        return -1, v.end()
    return start, v.end()


def multipart_fields(text: str, secret: Callable[[str], bool]
                     ) -> Iterator[tuple[int, str, str]]:
    """``(offset, name, value)`` of each credential multipart field in a file's text, raw or
    inside a JSON string (``\\r\\n`` written as escapes); the value is its first line."""
    for m in _rx(_MP_NAME).finditer(text):
        if not secret(_field_name(m)):
            continue
        blank = _rx(_BLANK_ANY).search(text, m.end(), m.end() + _HEAD_MAX)
        if blank is None:
            continue
        v = _rx(_VALUE).match(text, blank.end(), blank.end() + _VALUE_MAX)
        value = v.group(1).strip() if v is not None else ""
        if value:
            yield m.start(), _field_name(m), value


# ---------------------------------------------------------------- lines of a text body

# A whole line ``name: value`` / ``name = value`` (``export`` allowed before it). The value is
# the rest of the line, greedy, its trailing blanks trimmed after: a lazy value before
# ``[ \t]*$`` rescanned a line of spaces from each character.
_LINE = (r"(?m)^[ \t]*(?:export[ \t]+)?([A-Za-z][A-Za-z0-9_.\-]{0,63})[ \t]*[:=][ \t]*"
         r"([^\r\n]*)")


def _line_spans(s: str, secret: Callable[[str], bool], hints: tuple[str, ...]
                ) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each credential line's value in ``s`` (see the module
    docstring). Text holding none of ``hints`` is not read line by line: a match object a
    line cost ~0.6 us (4 KB of ``host: ...`` lines: 150 us, the hint checks ~45 us on a
    loaded box; text without ``:`` or ``=`` ~0.3 us)."""
    if (":" not in s and "=" not in s) or not hinted(s, hints):
        return
    for m in _rx(_LINE).finditer(s):
        value = m.group(2).rstrip(" \t")
        if value and not value.startswith(SKIP_VALUES) and secret(m.group(1)):
            yield m.start(2), m.start(2) + len(value)


def mask_lines(s: str, replace: Callable[[str], str], secret: Callable[[str], bool],
               hints: tuple[str, ...]) -> str:
    """``s`` with the value of each credential line passed through ``replace``: ``secret``
    judges a line's name, ``hints`` (lower case) are substrings of every name it accepts."""
    out: list[str] = []
    pos = 0
    for start, end in _line_spans(s, secret, hints):
        out += (s[pos:start], replace(s[start:end]))
        pos = end
    if not out:
        return s
    out.append(s[pos:])
    return "".join(out)


def line_values(s: str, secret: Callable[[str], bool], hints: tuple[str, ...]) -> list[str]:
    """The values of ``s``'s credential lines, as an answer quoting the text may hold them."""
    return [s[start:end] for start, end in _line_spans(s, secret, hints)]
