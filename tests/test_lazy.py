"""``_lazy.pattern``: a regular expression compiled when first used, served as compiled."""

from __future__ import annotations

import re
import subprocess
import sys

from dejacache._lazy import pattern


def test_a_pattern_answers_as_the_compiled_one() -> None:
    lazy = pattern(r"(\d+)-(?P<word>[a-z]+)", re.IGNORECASE)
    real = re.compile(r"(\d+)-(?P<word>[a-z]+)", re.IGNORECASE)
    for text in ("12-ab", "x 7-Q y", "none"):
        assert bool(lazy.match(text)) == bool(real.match(text))
        assert ([m.groups() for m in lazy.finditer(text)]
                == [m.groups() for m in real.finditer(text)])
        assert lazy.sub("#", text) == real.sub("#", text)
    assert (lazy.pattern, lazy.flags, lazy.groups) == (real.pattern, real.flags, real.groups)


def test_bytes_patterns_work_too() -> None:
    assert pattern(rb"[0-9a-f]{4}").fullmatch(b"beef") is not None


def test_nothing_is_compiled_until_first_use() -> None:
    code = ("import sys\nfrom dejacache._lazy import pattern\np = pattern(r'a+')\n"
            "print('re' in sys.modules)\n"
            "print(p.fullmatch('aa') is not None, 'fullmatch' in vars(p))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "True", "True"]


def test_served_names_load_on_first_read_and_stay() -> None:
    code = ("import sys\nimport dejacache.keys as keys\n"
            "print('dejacache._key_parts' in sys.modules)\n"
            "kp = keys.KeyParts\n"
            "print(kp is sys.modules['dejacache._key_parts'].KeyParts, 'KeyParts' in vars(keys))\n"
            "try:\n    keys.NoSuchName\n"
            "except AttributeError as e:\n    print('NoSuchName' in str(e))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "True", "True", "True"]
