"""Statistics: the pure inference maths, the compare report built on them, and its plots."""
