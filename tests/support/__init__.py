"""Helpers that unit and integration tests of one topic share (import them: `from support.gpus import h100`)."""
