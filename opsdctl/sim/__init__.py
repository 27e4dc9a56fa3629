"""The simulator: the other host of the worker's loop (opsdctl.plan.loop.WorkerLoop) beside daemon/.

A 6-hour, 4-GPU session replayed under a fake clock, a fake queue and a fake executor over the
planner's own gate: `world` (the benchmark and the stage durations), `session` (the simulated
store and the user's queue), `seams` (the loop's clock, queue and executor over a session),
`replay` (one session under a policy, judged against the true effects), `results` (many sessions,
their figures and tables) and `operating` (compare's verdict rule over many simulated studies).
`opsdctl simulate` and benchmarks/ call it; nothing below the CLI imports it.
"""
