"""Which conversation a request made here belongs to, as the prompt-prefix monitor and the
runtime cache fixes name it: the ``agent_session`` in effect (``tenant/session`` with a
tenant), else the name a monitor gave the thread it started (a thread does not inherit the
session itself, nor its tenant: ``_lease_threads``)."""

from __future__ import annotations

import contextvars

from .session import current_session

__all__ = ["THREAD_SESSION", "conversation"]

# The conversation a thread started inside a monitor belongs to: the starter's session, by
# name only.
THREAD_SESSION: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "dejacache_monitor_session", default=None
)


def conversation() -> str | None:
    """The conversation of a request made here (None: no session names one)."""
    s = current_session()
    if s is not None:
        return s.session_id if s.tenant is None else f"{s.tenant}/{s.session_id}"
    return THREAD_SESSION.get()
