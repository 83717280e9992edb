"""The public frozen dataclasses whose ``__init__`` is written out through
``_slots.slot_setters`` (a faster construction than the generated one): their signature and
their fields' defaults are two spellings of one fact, checked here so they cannot drift."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from dejacache.config import Effective
from dejacache.stores import Record


@pytest.mark.parametrize("cls", [Effective, Record])
def test_the_written_out_init_takes_every_field_with_its_declared_default(cls: type) -> None:
    params = inspect.signature(cls.__init__).parameters
    for f in dataclasses.fields(cls):
        if not f.init:
            assert f.name not in params
            continue
        default = f.default if f.default is not dataclasses.MISSING else inspect.Parameter.empty
        assert params[f.name].default == default, f.name
    assert [p for p in params if p != "self"] == [f.name for f in dataclasses.fields(cls)
                                                  if f.init]
