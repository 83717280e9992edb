"""``dejacache report``: a recorded run as one self-contained HTML page.

:func:`report` renders a cassette (or a directory of them) as a timeline of model, tool and
function calls with durations, tokens, cost and the prompt-prefix reuse of each turn, with the
stored (redacted) request and response bodies; :func:`report` with two paths shows the drift
between two recordings. ``dejacache report FILE_OR_DIR [B] [-o report.html]`` on the command
line.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterable
from typing import Any

from .html import render_drift, render_runs
from .model import Drift, PrefixTurn, Run, Step, apply_calls, diff_runs, load_run

__all__ = ["Drift", "PrefixTurn", "Run", "Step", "apply_calls", "diff_runs", "load_run",
           "render_drift", "render_runs", "report"]


def report(target: str | pathlib.Path, other: str | pathlib.Path | None = None, *,
           calls: Iterable[Any] | None = None,
           progress: Callable[[int, int, pathlib.Path], None] | None = None) -> str:
    """The HTML page: for ``target`` (a cassette or a directory of them), or, given
    ``other``, for the drift from recording ``target`` to recording ``other``.

    ``calls``: a block's ``tape.calls`` (after it closed), so each step shows whether that run
    replayed it, recorded it or left it unused. ``progress(done, total, path)`` is called
    before each file of a directory is read."""
    import orjson

    from ..cassettes.prefix_report import iter_cassettes
    from ..errors import CassetteError

    if other is not None:
        return render_drift(diff_runs(load_run(target), load_run(other)))
    root = pathlib.Path(target)
    if calls is not None:
        run = load_run(root)
        apply_calls(run, calls)
        return render_runs([run], title=f"dejacache report: {root.name}")
    paths = list(iter_cassettes(root))
    titles = [str(p.relative_to(root)) if root.is_dir() else p.name for p in paths]
    runs, skipped = [], []
    for i, (p, t) in enumerate(zip(paths, titles, strict=True)):
        if progress is not None:
            progress(i, len(paths), p)
        try:
            runs.append(load_run(p, title=t))
        except (CassetteError, orjson.JSONDecodeError) as exc:
            if not root.is_dir():
                raise
            skipped.append((t, str(exc)))  # other JSON beside the cassettes: named, not fatal
    return render_runs(runs, title=f"dejacache report: {root.name}", skipped=skipped)
