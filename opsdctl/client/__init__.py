"""What a command does to chains without running them: queue, eval-only, cancel, wait, diff, and
whether the worker is alive. Clients only touch the store; the worker starts every stage."""
