"""Countdown file contents that are not a budget: not a number, not finite, absurd, empty, not UTF-8."""

BAD_VALUES = ["nan", "inf", "-inf", "1e20", "-1e20", "", "soon", "\xff"]
