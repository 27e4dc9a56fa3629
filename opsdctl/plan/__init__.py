"""Planning: GPU gate, budget, admission, duration estimates, policy, futility, timeline, simulator."""
