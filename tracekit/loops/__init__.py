"""Loops that stay loops: the ``loop`` op (:mod:`.op`), and rolling a trace's iterations into
it (:mod:`.roll`)."""

from .op import LOOP, run_loop
from .roll import RollNote, roll
from .unroll import unroll

__all__ = ["LOOP", "RollNote", "roll", "run_loop", "unroll"]
