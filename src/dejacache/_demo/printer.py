"""Output for the demo: rich when it is installed and wanted, plain text otherwise."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import IO, Any

__all__ = ["Printer", "make_printer"]

_MARKUP = re.compile(r"\[/?[a-z ]+\]")


class Printer:
    """Plain text. Lines may carry rich-style ``[bold]...[/bold]`` markup, which is stripped."""

    def __init__(self, file: IO[str] | None = None) -> None:
        self._file = file

    @property
    def file(self) -> IO[str]:
        return self._file or sys.stdout  # resolved late so pytest's capture sees the output

    def line(self, text: str = "") -> None:
        print(_MARKUP.sub("", text), file=self.file, flush=True)

    def rule(self, title: str) -> None:
        self.line("")
        self.line(f"== {title} " + "=" * max(0, 66 - len(title)))

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        cells = [[str(c) for c in headers], *[[str(c) for c in r] for r in rows]]
        widths = [max(len(_MARKUP.sub("", r[i])) for r in cells) for i in range(len(headers))]
        for n, row in enumerate(cells):
            self.line("  ".join(_MARKUP.sub("", c).ljust(w) for c, w in zip(row, widths,
                                                                            strict=True)).rstrip())
            if n == 0:
                self.line("  ".join("-" * w for w in widths))


class _RichPrinter(Printer):
    def __init__(self, file: IO[str] | None = None) -> None:
        super().__init__(file)
        from rich.console import Console

        self._console = Console(file=file, highlight=False)

    def line(self, text: str = "") -> None:
        self._console.print(text)

    def rule(self, title: str) -> None:
        self._console.rule(f"[bold]{title}[/bold]")

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        from rich.table import Table

        t = Table(show_edge=False, header_style="bold")
        for h in headers:
            t.add_column(h)
        for r in rows:
            t.add_row(*(str(c) for c in r))
        self._console.print(t)


def make_printer(plain: bool | None = None, file: IO[str] | None = None) -> Printer:
    """Rich output unless ``plain`` (or rich is not installed)."""
    if not plain:
        try:
            import rich  # noqa: F401
        except ImportError:
            return Printer(file)
        return _RichPrinter(file)
    return Printer(file)
