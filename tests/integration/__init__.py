"""Tests through real subprocesses: the CLI, the worker, stage scripts, the workloads end to end."""
