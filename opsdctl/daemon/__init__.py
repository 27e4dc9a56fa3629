"""The worker daemon: the one process per store that runs chains through its executors (local,
Ray), starts and watches stages, stops their processes, and recovers or salvages their work."""
