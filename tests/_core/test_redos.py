"""The static check that refuses user regexes which can take exponential time."""

from __future__ import annotations

import re
import time

import pytest

from dejacache._core.redos import exponential

# Each of these backtracks exponentially on some text (the classic shapes: a repeated part
# of variable length that can end where it could go on, or overlapping alternatives).
DANGEROUS = [
    r"(a+)+$", r"(a*)*b", r"(a|a)*$", r"(\w+\s?)+$", r"(?:\s*,\s*)*;",
    r"^(([a-z])+.)+[A-Z]([a-z])+$", r"(x+x+)+y", r"(.*a){12}", r"(a|b|ab)*c",
    r"(\d+|\d+\.\d+)+x", r"(?:a?)+b", r"((ab)*|a)*c", r"(?=(a+)+$)", r"([^>]+|>)+<",
]
# Ordinary volatile patterns: accepted.
SAFE = [
    r"\d{4}-\d{2}-\d{2}", r"\d\d:\d\d:\d\d(?:\.\d+)?",
    r"(?s)<opentelemetry_traces>.*</opentelemetry_traces>",
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", r"(?:\d{1,3}\.){3}\d{1,3}",
    r"(<[^>]*>)+", r"(ab+)*c", r"(?:foo|bar)+", r"req_[A-Za-z0-9]+", r"(a++)+$", r"(?>a+)+$",
    r"(\d+,)*\d+", r"run-\d+", r"localhost:\d+", r"\b[0-9a-f]{32}\b", r"(?:[a-z]+://)?host",
    r"(a|b)*c", r"(\s*,\s*[a-z]+)*",
    # alternatives the parser folds into one class or one prefix: no second way to match
    r"(a|ab)*c", r"(?i)(a|A)+$", r"(\w|\d)+!",
]


@pytest.mark.parametrize("pattern", DANGEROUS)
def test_exponential_patterns_are_refused(pattern: str) -> None:
    assert exponential(re.compile(pattern)) is not None


@pytest.mark.parametrize("pattern", SAFE)
def test_ordinary_patterns_are_accepted(pattern: str) -> None:
    assert exponential(re.compile(pattern)) is None


@pytest.mark.parametrize("pattern", SAFE)
def test_accepted_patterns_stay_fast_on_hostile_text(pattern: str) -> None:
    """What the check accepts does not blow up on the texts that break the refused ones
    (24 characters: ``(a+)+$`` takes seconds there; these take microseconds)."""
    rx = re.compile(pattern)
    texts = [c * 24 + "!" for c in "a1 ,<>.-x"] + ["ab" * 12 + "!", "1," * 12 + "!"]
    start = time.perf_counter()
    for text in texts:
        rx.sub("<volatile>", text)
    assert time.perf_counter() - start < 1.0  # each is well under a millisecond
