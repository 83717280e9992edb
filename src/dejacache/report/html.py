"""One self-contained HTML page per report: inline CSS, no script, no external URL.

No CDN and no JavaScript: the page is opened from CI artifacts, mail attachments and air-gapped
machines, and bodies expand with ``<details>``. Every value from a recording is escaped.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from .._core.counts import counted
from .model import Drift, Missed, Run, Step

__all__ = ["render_drift", "render_runs"]

MAX_BODY = 200_000  # characters of one pretty-printed body shown before it is cut

_CSS = """
:root{--fg:#1d2330;--mut:#5d6675;--bg:#fff;--line:#e3e6eb;--model:#3b6fd4;--tool:#d9822b;
--function:#6b7a8f;--add:#1f8a4c;--drop:#c23b3b;--chg:#b7791f;--soft:#f5f7fa}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);
background:var(--bg);margin:0;padding:24px 32px;max-width:1400px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 10px}
h3{font-size:15px;margin:18px 0 8px}
.path,.mut{color:var(--mut)}code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:14px 0}
.card{border:1px solid var(--line);border-radius:8px;padding:10px 14px;min-width:150px;
background:var(--soft)}.card b{display:block;font-size:20px}.card span{color:var(--mut)}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:5px 8px;
border-bottom:1px solid var(--line);vertical-align:top}th{color:var(--mut);font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.kind{display:inline-block;border-radius:4px;padding:0 6px;color:#fff;font-size:12px}
.kind.model{background:var(--model)}.kind.tool{background:var(--tool)}
.kind.function{background:var(--function)}.kind.http{background:#7b5cc4}
.state{font-size:12px;border:1px solid var(--line);border-radius:4px;padding:0 5px}
.state.replayed{color:var(--add);border-color:var(--add)}
.state.unused{color:var(--mut)}.state.recorded{color:var(--model);border-color:var(--model)}
.tl{position:relative;height:18px;background:var(--soft);border-radius:3px;min-width:200px}
.tl i{position:absolute;top:2px;bottom:2px;border-radius:3px;min-width:2px}
.tl i.model{background:var(--model)}.tl i.tool{background:var(--tool)}
.tl i.function{background:var(--function)}.tl i.http{background:#7b5cc4}
details{margin:2px 0 8px}summary{cursor:pointer;color:var(--mut)}
pre{background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:8px;
overflow:auto;max-height:480px;white-space:pre-wrap;word-break:break-word}
.err{color:var(--drop)}.warn{border-left:4px solid var(--chg);padding:6px 10px;
background:#fff8e6}
.added{color:var(--add)}.dropped{color:var(--drop)}.changed{color:var(--chg)}
.cols{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:24px}
.cols>div{overflow-x:auto}
nav a{margin-right:12px}footer{margin-top:36px;color:var(--mut);font-size:12px}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(n: int) -> str:
    return f"{n:,}"


def _money(x: float) -> str:
    if abs(x) >= 1:
        return f"${x:,.2f}"
    return f"${x:.4f}" if abs(x) >= 0.01 or x == 0 else f"${x:.6f}"


def _secs(x: float) -> str:
    return f"{x * 1000:,.0f} ms" if abs(x) < 1 else f"{x:,.2f} s"


_MINUS, _NONE = "\u2212", "\u2013"  # typographic minus; en dash for "no value"


def _signed(x: float, fmt: Callable[[Any], str]) -> str:
    return ("+" if x > 0 else "") + fmt(x) if x >= 0 else _MINUS + fmt(-x)


def _pretty(value: Any) -> str:
    try:
        text = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS,
                            default=str).decode()
    except TypeError:
        text = repr(value)
    if len(text) > MAX_BODY:
        text = text[:MAX_BODY] + f"\n… cut at {MAX_BODY:,} characters (see the cassette file)"
    return f"<pre>{_e(text)}</pre>"


def _page(title: str, body: str) -> str:
    from .. import __version__

    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>\n{body}\n"
        f"<footer>dejacache {_e(__version__)} · request and response bodies are shown as "
        "stored: credentials were redacted before the cassette was written · costs are "
        "estimates from dejacache's dated price table</footer></body></html>\n"
    )


def _cards(items: Iterable[tuple[str, str]]) -> str:
    return "<div class=\"cards\">" + "".join(
        f"<div class=\"card\"><b>{_e(v)}</b><span>{_e(k)}</span></div>" for k, v in items
    ) + "</div>"


def _totals(run: Run) -> str:
    turns = [s.prefix for s in run.steps if s.prefix is not None]
    prompt = sum(t.prompt_tokens for t in turns)
    cached = sum(t.expected_cached for t in turns)
    cards = [
        ("steps", f"{len(run.steps)}"),
        ("model calls · tool calls · other calls",
         f"{run.count('model')} · {run.count('tool')} · "
         f"{run.count('function') + run.count('http')}"),
        ("input tokens", _num(run.input_tokens)),
        ("output tokens", _num(run.output_tokens)),
        ("estimated cost", _money(run.cost)),
        ("recorded duration", _secs(run.duration)),
    ]
    if run.outcomes:
        cards.append(("replayed · recorded · unused", " · ".join(
            str(sum(1 for s in run.steps if s.state == k))
            for k in ("replayed", "recorded", "unused"))))
    if prompt:
        cards.append(("prompt tokens reusable from the provider's cache",
                      f"{cached / prompt:.0%}"))
    return _cards(cards)


def _timeline(run: Run) -> str:
    total = run.duration or 1.0
    rows, start = [], 0.0
    for s in run.steps:
        left = 100.0 * start / total
        width = max(100.0 * s.duration / total, 0.3)
        start += s.duration
        tokens = _tokens(s)
        rows.append(
            f"<tr data-step=\"{s.index}\"><td class=\"num\">{s.index}</td>"
            f"<td><span class=\"kind {s.kind}\">{s.kind}</span></td>"
            f"<td><code>{_e(s.name)}</code>{_model_note(s)}{_error_note(s)}</td>"
            f"<td style=\"width:34%\"><div class=\"tl\" title=\"{_e(_secs(s.duration))}\">"
            f"<i class=\"{s.kind}\" style=\"left:{left:.3f}%;width:{width:.3f}%\"></i></div></td>"
            f"<td class=\"num\">{_secs(s.duration)}</td><td class=\"num\">{tokens}</td>"
            f"<td class=\"num\">{_money(s.cost) if s.cost else _NONE}</td>"
            f"<td class=\"num\" title=\"{_e(s.recorded)}\">{_e(s.age or _NONE)}</td>"
            f"<td><span class=\"state {s.state}\">{s.state}</span></td></tr>"
        )
    return (
        "<table class=\"timeline\"><thead><tr><th class=\"num\">#</th><th>kind</th>"
        "<th>call</th><th>timeline</th><th class=\"num\">duration</th>"
        "<th class=\"num\">tokens</th><th class=\"num\">cost</th><th class=\"num\">age</th>"
        "<th>state</th></tr></thead>"
        "<tbody>" + "".join(rows) + "</tbody></table>"
    )


def _tokens(s: Step) -> str:
    total = s.input_tokens + s.output_tokens
    if not total and s.kind != "model":
        return _NONE  # tools and functions cost no tokens
    # estimated from the characters when the recording carried no usage
    return _num(total) if s.tokens_exact else "\u2248" + _num(total)


def _model_note(s: Step) -> str:
    return f" <span class=\"mut\">{_e(s.model)}</span>" if s.model else ""


def _error_note(s: Step) -> str:
    if s.error is None:
        status = s.response.get("status") if isinstance(s.response, dict) else None
        if isinstance(status, int) and status >= 400:
            return f" <span class=\"err\">HTTP {status}</span>"
        return ""
    kind = s.error.get("type", "error") if isinstance(s.error, dict) else "error"
    return f" <span class=\"err\">raised {_e(kind)}</span>"


def _bodies(run: Run) -> str:
    out = []
    for s in run.steps:
        tokens = ("no tokens" if _tokens(s) == _NONE else
                  f"{_num(s.input_tokens)} in / {_num(s.output_tokens)} out"
                  + ("" if s.tokens_exact else " (estimated)"))
        parts = [f"<details class=\"step\" data-step=\"{s.index}\"><summary>"
                 f"<b>#{s.index}</b> <code>{_e(s.name)}</code> · {_secs(s.duration)} · "
                 f"{tokens}</summary>",
                 f"<p class=\"mut\">{_e(s.recorded)}</p>" if s.recorded else "",
                 "<h3>request</h3>", _pretty(s.request), "<h3>response</h3>",
                 _pretty(s.response)]
        if s.error is not None:
            parts += ["<h3>error</h3>", _pretty(s.error)]
        parts.append("</details>")
        out.append("".join(parts))
    return "".join(out)


def _prefix(run: Run) -> str:
    rows = []
    for s in run.steps:
        t = s.prefix
        if t is None:
            continue
        reported = _num(t.reported_cached) if t.reported_cached is not None else "not reported"
        # Hazards (found before they cost anything) are shown with the breaks, never as one.
        notes = [_e(b) for b in t.breaks] + [
            f"<span class=\"mut\">hazard: {_e(h)}</span>" for h in t.hazards]
        breaks = "<br>".join(notes) or "<span class=\"mut\">none</span>"
        rows.append(
            f"<tr data-step=\"{s.index}\"><td class=\"num\">{s.index}</td>"
            f"<td>{_e(t.session)}</td><td class=\"num\">{t.turn}</td>"
            f"<td class=\"num\">{_num(t.prompt_tokens)}</td>"
            f"<td class=\"num\">{_num(t.expected_cached)}</td><td class=\"num\">{reported}</td>"
            f"<td>{breaks}</td></tr>"
        )
    if not rows:
        return "<p class=\"mut\">No model requests the prefix monitor understands.</p>"
    return (
        "<p class=\"mut\">Providers serve an unchanged prompt prefix from their cache at a "
        "fraction of the input price; a break names where the prompt changed.</p>"
        "<table class=\"prefix\"><thead><tr><th class=\"num\">#</th><th>conversation</th>"
        "<th class=\"num\">turn</th><th class=\"num\">prompt tokens</th>"
        "<th class=\"num\">cacheable (expected)</th><th class=\"num\">cached (reported)</th>"
        "<th>breaks</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def _blobs(run: Run) -> str:
    """The payloads the recording keeps beside it, by size and type (none: no section)."""
    found = getattr(run.view, "blobs", None) or []
    if not found:
        return ""
    rows = "".join(
        f"<tr><td><code>{_e(b.hash)}</code></td><td class=\"num\">"
        f"{'missing' if b.size < 0 else _num(b.size)}</td><td>{_e(b.kind)}</td>"
        f"<td>{_e(', '.join(f'#{i}' for i in b.steps))}</td></tr>" for b in found)
    total = sum(b.size for b in found if b.size > 0)
    return (f"<h3>Blobs</h3><p class=\"mut\">{counted(len(found), 'payload')} kept once by "
            "hash in "
            f"<code>blobs/</code> beside the cassette, {_num(total)} bytes</p><table><thead>"
            "<tr><th>hash</th><th class=\"num\">bytes</th><th>type</th><th>steps</th></tr>"
            f"</thead><tbody>{rows}</tbody></table>")


def _missed(m: Missed) -> str:
    """One miss, opened: the request made and how it differs from the nearest recording."""
    if m.nearest is None:
        near = "<p class=\"mut\">No call of this name is recorded in this file.</p>"
    elif not m.diff:
        near = (f"<p class=\"mut\">The nearest recording, {_e(m.nearest)}, reads the same: "
                "they differ only in what keys hold and files do not (credentials, or a "
                "request edited by hand).</p>")
    else:
        near = (f"<p>Differences from the nearest recording, {_e(m.nearest)} (recorded -> "
                "now):</p><pre>" + _e("\n".join(m.diff[:30])) + "</pre>")
    return (f"<details class=\"step miss\" open><summary><b>missed</b> <code>{_e(m.label)}"
            f"</code></summary>{near}<h3>request</h3>{_pretty(m.request)}</details>")


def _run_section(run: Run, anchor: str) -> str:
    warn = (f"<p class=\"warn\">Replay would refuse this file: {_e(run.problem)}</p>"
            if run.problem else "")
    if run.missed:
        warn += ("<p class=\"warn\">Replay found no recording for: "
                 + "; ".join(f"<code>{_e(m.label)}</code>" for m in run.missed) + "</p>"
                 + "".join(_missed(m) for m in run.missed))
    return (
        f"<section class=\"run\" id=\"{anchor}\"><h2>{_e(run.title)}</h2>"
        f"<p class=\"path\">{_e(run.path)}</p>{warn}{_totals(run)}"
        f"<h3>Timeline</h3>{_timeline(run)}"
        f"<h3>Prompt-prefix reuse per turn</h3>{_prefix(run)}{_blobs(run)}"
        f"<h3>Requests and responses</h3>{_bodies(run)}</section>"
    )


def render_runs(runs: list[Run], title: str = "dejacache report",
                skipped: list[tuple[str, str]] | None = None) -> str:
    """The page for one recording, or a directory of them (one section each); ``skipped``:
    (file, why) of files in the directory that are not cassettes."""
    head = f"<h1>{_e(title)}</h1>"
    if skipped:
        head += ("<p class=\"warn\">Skipped (not cassettes): " + "; ".join(
            f"<code>{_e(name)}</code>: {_e(why)}" for name, why in skipped) + "</p>")
    if len(runs) > 1:
        total = Run("all", "", [s for r in runs for s in r.steps])
        head += (f"<p class=\"mut\">{len(runs)} recordings</p>" + _totals(total) + "<nav>"
                 + "".join(f"<a href=\"#run-{i}\">{_e(r.title)}</a>"
                           for i, r in enumerate(runs)) + "</nav>")
    if not runs:
        head += "<p class=\"mut\">No cassettes found.</p>"
    return _page(title, head + "".join(_run_section(r, f"run-{i}")
                                       for i, r in enumerate(runs)))


# ---------------------------------------------------------------- two recordings


def _step_list(steps: list[Step], css: str) -> str:
    if not steps:
        return "<p class=\"mut\">none</p>"
    return "<ul>" + "".join(
        f"<li class=\"{css}\"><code>{_e(s.label)}</code>{_model_note(s)} · "
        f"{_num(s.input_tokens + s.output_tokens)} tokens · {_money(s.cost)}</li>"
        for s in steps) + "</ul>"


def _token_change(old: Step, new: Step) -> str:
    a, b = old.input_tokens + old.output_tokens, new.input_tokens + new.output_tokens
    return f"; tokens {_num(a)} → {_num(b)}" if a != b else ""


def _reordered(d: Drift) -> str:
    if not d.reordered:
        return ""
    return ("<h2>Reordered</h2><p class=\"mut\">The same call, now after another step of "
            "its task.</p><ul>" + "".join(
                f"<li><code>{_e(x.label)}</code> → <code>{_e(y.label)}</code></li>"
                for x, y in d.reordered) + "</ul>")


def render_drift(d: Drift, title: str = "dejacache drift report") -> str:
    """Two recordings side by side: calls added, dropped and changed; token and cost delta."""
    verdict = ("<p class=\"added\"><b>No drift</b>: the same calls with the same requests "
               "and answers (provider-generated ids aside).</p>" if d.identical else "")
    cards = _cards([
        ("calls added", f"{len(d.added)}"), ("calls dropped", f"{len(d.dropped)}"),
        ("calls changed", f"{len(d.changed)}"), ("calls unchanged", f"{d.same}"),
        ("token delta", _signed(d.token_delta, _num)),
        ("cost delta", _signed(d.cost_delta, _money)),
        ("duration delta", _signed(d.duration_delta, _secs)),
    ])
    changed = "".join(
        f"<details class=\"changed\"{' open' if len(lines) <= 12 else ''}><summary>"
        f"<code>{_e(old.label)}</code> → "
        f"<code>{_e(new.label)}</code> ({counted(len(lines), 'field')}{_token_change(old, new)})"
        "</summary><ul>"
        + "".join(f"<li><code>{_e(line)}</code></li>" for line in lines) + "</ul></details>"
        for old, new, lines in d.changed) or "<p class=\"mut\">none</p>"
    body = (
        f"<h1>{_e(title)}</h1><p class=\"path\">A: {_e(d.a.path)}<br>B: {_e(d.b.path)}</p>"
        f"{verdict}{cards}"
        f"<h2>Added in B</h2>{_step_list(d.added, 'added')}"
        f"<h2>Dropped from A</h2>{_step_list(d.dropped, 'dropped')}"
        f"<h2>Changed</h2>{changed}"
        f"{_reordered(d)}"
        "<h2>Side by side</h2><div class=\"cols\">"
        f"<div><h3>A · {_e(d.a.title)}</h3>{_totals(d.a)}{_timeline(d.a)}</div>"
        f"<div><h3>B · {_e(d.b.title)}</h3>{_totals(d.b)}{_timeline(d.b)}</div></div>"
        f"<h2>Requests and responses</h2><div class=\"cols\"><div>{_bodies(d.a)}</div>"
        f"<div>{_bodies(d.b)}</div></div>"
    )
    return _page(title, body)
