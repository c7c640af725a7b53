"""bench --curve's stage breakdown wraps databuild's functions by module and name (bench/workers.py
STAGES); one that a move renames or relocates would silently drop out of the breakdown as "not
measured". This pins that every one of them is still where the bench looks."""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_every_stage_the_bench_times_is_a_function_of_databuild(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    sys.modules.pop("workers", None)
    from workers import STAGES

    missing = [f"{module}.{name}" for module, name, _ in STAGES
               if not callable(getattr(importlib.import_module(module), name, None))]
    assert not missing, f"bench/workers.py STAGES names functions databuild no longer has: {missing}"
    # the two the breakdown's timeline and the driver's CPU hang on
    assert inspect.isfunction(importlib.import_module("databuild.executors.local").from_columns)
    assert inspect.isfunction(importlib.import_module("databuild.build").write_rows)
