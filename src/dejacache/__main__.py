"""``python -m dejacache``: the command line, as the ``dejacache`` console script runs it (for
an environment whose scripts directory is not on ``PATH``, or to pick the interpreter)."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
