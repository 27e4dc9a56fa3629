"""Running chains: the worker, its executors (local, Ray), stages, processes, code snapshots, results."""
