"""What an import did: the calls written, the calls skipped and why, the credentials met.

Apart from the package so that each format's converter (``vcr``, ``agentcassette``) fills a
report without importing the package that dispatches to it.
"""

from __future__ import annotations

import dataclasses

__all__ = ["Converted", "ImportReport", "Skipped"]


@dataclasses.dataclass(frozen=True, slots=True)
class Converted:
    """One call written to the cassette: its place in the source and its call name."""

    index: int
    name: str


@dataclasses.dataclass(frozen=True, slots=True)
class Skipped:
    """One call of the source that was not written, and why."""

    index: int
    name: str
    reason: str


@dataclasses.dataclass(slots=True)
class ImportReport:
    """What ``import_file`` did. ``redacted`` counts credentials met in the source by where
    they were (``"request header authorization"``): none of them reaches the file.
    ``secrets_in_output`` lists any secret-shaped string still found in the written file (it
    should be empty)."""

    source: str
    output: str
    format: str
    converted: list[Converted] = dataclasses.field(default_factory=list)
    skipped: list[Skipped] = dataclasses.field(default_factory=list)
    redacted: dict[str, int] = dataclasses.field(default_factory=dict)
    secrets_in_output: list[str] = dataclasses.field(default_factory=list)
    written: bool = False
    #: how the cassette's calls are matched: "request" (whole) or "vcr" (method + URL)
    match: str = "request"

    def note_redacted(self, where: str) -> None:
        self.redacted[where] = self.redacted.get(where, 0) + 1

    def lines(self) -> list[str]:
        """The report as text, for the CLI."""
        out = [f"{self.source} ({self.format}) -> {self.output}"]
        how = " (matched on method + URL in recorded order)" if self.match == "vcr" else ""
        out.append(f"converted: {len(self.converted)} call(s){how}")
        for c in self.converted:
            out.append(f"  #{c.index} {c.name}")
        out.append(f"skipped: {len(self.skipped)} call(s)")
        for s in self.skipped:
            out.append(f"  #{s.index} {s.name}: {s.reason}")
        if self.redacted:
            out.append("redacted (not written):")
            for where, n in sorted(self.redacted.items()):
                out.append(f"  {where}: {n}")
        for f in self.secrets_in_output:
            out.append(f"  STILL IN THE CASSETTE: {f}")
        if not self.written:
            out.append("nothing was written")
        return out
