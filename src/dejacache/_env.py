"""The ``DEJACACHE_*`` environment variables dejacache reads, and the check that names a
misspelt one.

A misspelt project key, ini key, ``configure()`` argument or marker argument is refused with
"did you mean"; a misspelt variable (``DEJACACHE_MDOE=replay``) was ignored, so the run
recorded instead of replaying. It is a warning, not an error: an environment is shared with
other tools and CI, and a stale variable must not stop a run. Checked once per process, when
settings are first resolved, so no call pays for it.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Final

__all__ = ["KNOWN", "warn_unknown"]

#: Every ``DEJACACHE_*`` variable read anywhere in the package (a test greps the source
#: for them, so a new one cannot be left out and warned about).
KNOWN: Final = frozenset({
    "DEJACACHE_CACHE_KEY", "DEJACACHE_DEMO_LATENCY", "DEJACACHE_DIR", "DEJACACHE_IGNORE_HOSTS",
    "DEJACACHE_LEARN_DIR", "DEJACACHE_MAX_AGE", "DEJACACHE_MODE", "DEJACACHE_ON_EXPIRY",
    "DEJACACHE_PICKLE_SECRET", "DEJACACHE_PROJECT", "DEJACACHE_PROXY", "DEJACACHE_RUNTIME_CACHE",
    "DEJACACHE_SECRET_KEY", "DEJACACHE_SECRET_KEY_FILE", "DEJACACHE_VOLATILE",
})
_PREFIX: Final = "DEJACACHE_"
# Hooks of dejacache's own test suite (a crash injected mid-write, a second machine's key):
# never a user's setting, so never named as a typo.
_TESTS: Final = "DEJACACHE_TEST_"
_checked = [False]


def warn_unknown() -> None:
    """Warn once per process about each ``DEJACACHE_*`` variable dejacache does not read."""
    if _checked[0]:
        return
    _checked[0] = True
    unknown = sorted(n for n in os.environ
                     if n.startswith(_PREFIX) and n not in KNOWN and not n.startswith(_TESTS))
    if not unknown:
        return
    import warnings

    from ._suggest import did_you_mean
    from .errors import DejacacheWarning

    for name in unknown:
        warnings.warn(f"dejacache: environment variable {name} is not one dejacache reads, "
                      f"so it is ignored{did_you_mean(name, KNOWN)}", DejacacheWarning,
                      stacklevel=2)
