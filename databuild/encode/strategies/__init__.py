"""Loss-mask strategies: which tokens of a rendered conversation are training targets, one module per
strategy, looked up by the config's `loss_mask` name (as pack/ and sources/formats/ have theirs): a new
one is one module and its name here.

A strategy turns the render into samples of character spans (encode/masks.py makes them token masks).
A strategy that cannot place or close a span raises MaskError, naming the message: no build trains on
a mask it could not justify. `assistant` (assistant.py: the tagged spans of a template that declares
them, tagged.py, else the turns as inference writes them), `muse_spark` (muse_spark.py).
"""

from __future__ import annotations

from . import assistant, muse_spark
from .strategy import Strategy

STRATEGIES: dict[str, Strategy] = {strategy.name: strategy for strategy in (assistant.STRATEGY, muse_spark.STRATEGY)}


def strategy_for(name: str) -> Strategy:
    return STRATEGIES[name]
