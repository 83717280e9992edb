"""Integrations with the frameworks dejacache serves, one module each.

Each imports its framework lazily and raises ``ConfigurationError`` with the install line
when it is missing, so ``import dejacache`` never needs an extra:

* :mod:`dejacache.integrations.scenario`: langwatch-scenario (``pip install
  'dejacache[scenario]'``), every ``scenario.run``/``arun`` recorded and replayed through a
  cassette named after the scenario.
"""

from __future__ import annotations
