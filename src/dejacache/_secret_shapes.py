"""The text of the secret-shaped patterns: 34 kinds of API keys, tokens (in a URL's path too)
and URL passwords, the substrings each match contains, and the URL and query-parameter patterns
keys mask credentials in.

Read once, where ``_secret_masks`` compiles its patterns (``_secret_masks._re``: the first
string scanned for a credential) or first asks for the needles (``may_be_secret``). Apart
from ``_secrets.py``, whose credential *names* every key checks: a replay hit that scans no text
never builds these tables.
"""

from __future__ import annotations

from typing import Final

__all__ = ["NEEDLES", "PARAM", "SHAPES", "URL", "USERINFO"]

# A left boundary that also holds inside JSON text: ``\nsk-...`` is written ``\\nsk-...`` in a
# file, where a plain ``\b`` would see the letter ``n`` and miss the key (keys and ``scan`` read
# JSON text, redaction reads raw strings: all three must agree). ``{w}``: checked ``w``
# characters later, after a shape's literal prefix (see ``_at``).
_L = r"(?:(?<![A-Za-z0-9_]{w})|(?<=\\[nrtbf]{w})|(?<=\\u00[0-9a-fA-F]{{2}}{w}))"
_SEP = r"(?:[\s\"':=]|\\[nrt\"])+"
# A JWT starts only where a run of base64url characters (``-`` included) starts. With ``_L``,
# every ``-eyJ`` inside one long run was a start that scanned to the run's end before failing
# on the missing ``.``: 62 KB of ``-eyJ`` took 5.5 s. One start per run keeps it linear.
_LB64 = r"(?:(?<![A-Za-z0-9_\-]{w})|(?<=\\[nrtbf]{w})|(?<=\\u00[0-9a-fA-F]{{2}}{w}))"


def _at(prefix: str, width: int, rest: str, left: str = _L) -> str:
    """A shape that starts with ``prefix`` (a regex matching exactly ``width`` characters,
    none a line break) where ``left`` holds, then ``rest``; all of it group ``s``.

    The left boundary is asserted after the prefix, looking back over it: sre then searches
    for the prefix's leading literal (a fast scan) instead of trying the boundary at every
    position (measured on 20 KB of prose holding the needle: 1.3 ms -> 17 us a search)."""
    skip = "." * width
    return f"(?P<s>{prefix}{left.format(w=skip)}{rest})"


# A URL's userinfo up to its password, and one character of a password (see "url password").
_USER = r"://[^\s\"'<>\\/?#@:]{0,128}:"
_PASSWORD = r"[^\s\"'<>\\/?#]"

# Secret-shaped strings by kind (compiled: ``_secrets.SECRET_PATTERNS``). Group ``s`` is the
# secret itself, so a mask keeps the rest (``Bearer <...>``) and never eats a JSON quote.
SHAPES: Final[dict[str, str]] = {
    "anthropic key": _at("sk-ant-", 7, r"[A-Za-z0-9_\-]{16,}"),
    "openai key": _at("sk-", 3, r"(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"),
    "google api key": _at("AIza", 4, r"[0-9A-Za-z_\-]{35}"),
    "aws access key": _at("A(?:KIA|SIA)", 4, r"[0-9A-Z]{16}") + r"(?![0-9A-Za-z])",
    "aws secret key": (
        r"(?:aws|AWS|Aws)_?(?:secret|SECRET|Secret)_?(?:access|ACCESS|Access)_?(?:key|KEY|Key)"
        + _SEP + r"(?P<s>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"),
    "bearer token": (
        r"(?:bearer|Bearer|BEARER)(?:\s|\\[nrt])+(?P<s>(?!<)[A-Za-z0-9_\-.~+/]{16,}=*)"),
    "jwt": _at("eyJ", 3, r"[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
               _LB64),
    "github token": _at("gh[pousr]_", 4, r"[A-Za-z0-9]{36,}"),
    "slack token": _at("xox[abposr]-", 5, r"[A-Za-z0-9\-]{10,}"),
    "hugging face token": _at("hf_", 3, r"[A-Za-z0-9]{30,}"),
    # PEM private keys of every kind (PKCS#1 RSA, EC, DSA, PKCS#8 plain and ENCRYPTED,
    # OPENSSH, PGP ``PRIVATE KEY BLOCK``, ssh.com's ``---- BEGIN SSH2 ENCRYPTED PRIVATE KEY
    # ----``): the body up to the next run of four dashes (its END line, or the end of the
    # text), so a header alone (one line of a PEM file that ``scan`` reads) is found too. The
    # body is one unambiguous run: never rescanned.
    "private key": (
        r"-----? ?BEGIN (?:[A-Z0-9]{1,20} ){0,4}PRIVATE KEY(?: BLOCK)? ?-----?"
        r"(?P<s>[^-]*(?:-(?!---)[^-]*)*)"),
    # Google OAuth access tokens (``ya29.a0...``, service accounts' ``ya29.c.c0...``): dots
    # only between runs, so a sentence's full stop is not taken.
    "google oauth token": _at(r"ya29\.", 5,
                              r"(?=[0-9A-Za-z_\-.]{20})[0-9A-Za-z_\-]+(?:\.[0-9A-Za-z_\-]+)*"),
    "google refresh token": _at("1//0", 4, r"[0-9A-Za-z_\-]{30,}"),
    "google oauth client secret": _at("GOCSPX-", 7, r"[0-9A-Za-z_\-]{24,}"),
    "github fine-grained token": _at("github_pat_", 11, r"[0-9A-Za-z_]{40,}"),
    "stripe key": _at("[rs]k_(?:live|test)_", 8, r"[0-9A-Za-z]{20,}"),
    "stripe webhook secret": _at("whsec_", 6, r"[0-9A-Za-z+/=]{24,}"),
    "gitlab token": _at("glpat-", 6, r"[0-9A-Za-z_\-]{20,}"),
    "groq key": _at("gsk_", 4, r"[0-9A-Za-z]{40,}"),
    "xai key": _at("xai-", 4, r"[0-9A-Za-z]{40,}"),
    "perplexity key": _at("pplx-", 5, r"[0-9A-Za-z]{40,}"),
    "replicate token": _at("r8_", 3, r"[0-9A-Za-z]{30,}"),
    "langsmith key": _at("lsv2_", 5, r"(?:pt|sk)_[0-9a-f]{32}_[0-9a-f]{10}"),
    "tavily key": _at("tvly-", 5, r"(?:dev-|prod-)?[0-9A-Za-z]{24,}"),
    "npm token": _at("npm_", 4, r"[0-9A-Za-z]{36,}"),
    "pypi token": _at("pypi-AgE", 8, r"[0-9A-Za-z_\-]{50,}"),
    "sendgrid key": _at(r"SG\.", 3, r"[0-9A-Za-z_\-]{16,32}\.[0-9A-Za-z_\-]{30,}"),
    "twilio key": _at("SK", 2, r"[0-9a-fA-F]{32}") + r"(?![0-9A-Za-z])",
    "digitalocean token": _at("do[opr]_v1_", 7, r"[0-9a-f]{64}"),
    "databricks token": _at("dapi", 4, r"[0-9a-f]{32}(?:-[0-9])?") + r"(?![0-9A-Za-z])",
    # Tokens that travel in a URL's path, where no name says credential: a Telegram bot's
    # (``/bot123456789:AA.../getMe``), a Slack incoming webhook's last segment
    # (``/services/T.../B.../SECRET``), a Discord webhook's (``/api/webhooks/ID/SECRET``).
    # The ids before them name the bot or channel and stay; each run is read once from its
    # start (digits after a non-digit, a literal prefix), so every pattern stays linear.
    "telegram bot token": (
        r"(?<![0-9])[0-9]{5,12}:(?P<s>AA[0-9A-Za-z_\-]{30,})(?![0-9A-Za-z_\-])"),
    "slack webhook": (
        r"services/T[0-9A-Z]{6,}/B[0-9A-Z]{6,}/(?P<s>[0-9A-Za-z]{20,})(?![0-9A-Za-z])"),
    "discord webhook": (
        r"webhooks/[0-9]{17,20}/(?P<s>[0-9A-Za-z_\-]{60,})(?![0-9A-Za-z_\-])"),
    # The password of a URL's userinfo, any scheme (``postgresql://app:pw@db``,
    # ``https://user:pw@host``): up to the last ``@`` before the host's end, since a raw
    # password may hold one. Both runs are bounded, so each ``://`` is read a bounded length.
    "url password": _USER + rf"(?P<s>{_PASSWORD}{{1,256}})@",
}
# Substrings every match contains: one C-speed ``in`` per needle skips the regexes for the
# common string (measured: the regexes were 80% of recording time on a 20 KB request).
NEEDLES: Final[dict[str, tuple[str, ...]]] = {
    "anthropic key": ("sk-ant-",),
    "openai key": ("sk-",),
    "google api key": ("AIza",),
    "aws access key": ("AKIA", "ASIA"),
    "aws secret key": ("ecret", "ECRET"),
    "bearer token": ("earer", "EARER"),
    "jwt": ("eyJ",),
    "github token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    "slack token": ("xox",),
    "hugging face token": ("hf_",),
    "private key": ("PRIVATE KEY",),
    "google oauth token": ("ya29.",),
    "google refresh token": ("1//0",),
    "google oauth client secret": ("GOCSPX-",),
    "github fine-grained token": ("github_pat_",),
    "stripe key": ("k_live_", "k_test_"),
    "stripe webhook secret": ("whsec_",),
    "gitlab token": ("glpat-",),
    "groq key": ("gsk_",),
    "xai key": ("xai-",),
    "perplexity key": ("pplx-",),
    "replicate token": ("r8_",),
    "langsmith key": ("lsv2_",),
    "tavily key": ("tvly-",),
    "npm token": ("npm_",),
    "pypi token": ("pypi-AgE",),
    "sendgrid key": ("SG.",),
    "twilio key": ("SK",),
    "digitalocean token": ("_v1_",),
    "databricks token": ("dapi",),
    "telegram bot token": (":AA",),
    "slack webhook": ("services/T",),
    "discord webhook": ("webhooks/",),
    "url password": ("://",),
}
# URLs, whose query and fragment parameters ``PARAM`` then reads: from a URL's first ``/`` on,
# so any scheme (``wss://``, ``postgresql://``) and a relative URL (``/cb?code=...``, a
# ``Location`` header) alike. A keyed mask is part of a URL (``?password=<secret:…>``): a
# password that literally is another one's mask is masked again, never keyed as that other
# password. Every pattern here is linear in its input (tested at 1 MB): a URL is matched whole
# and its ``?`` checked after, since ``https?://[^?]+\?`` rescanned the rest of the run from
# every ``http`` in it (and a scheme read before ``://`` would rescan a run of letters from
# each one); a parameter name stops at ``?``, since ``[^=&;#]+=`` rescanned from every ``?``
# of ``????...``.
URL: Final = r"/[^\s\"'<>\\]+(?:<secret:[0-9a-f]{128}>[^\s\"'<>\\]*)*"

# One ``name=value`` of a raw query string or fragment (OAuth's implicit flow answers
# ``#access_token=...``); values are replaced in place, never re-encoded, so two different URLs
# can never come out the same.
PARAM: Final = r"(?<=[?&;#])([^=&;#?]+)=([^&;#]*)"

# A userinfo password as keys mask it, in canonical JSON: a ``url password`` whose password may
# also be a keyed mask, which keys mask again (as they do a query value), so a password that
# literally is another one's mask never keys as that other password.
USERINFO: Final = _USER + rf"(?P<s>(?:{_PASSWORD}|<secret:[0-9a-f]{{128}}>){{1,256}})@"
