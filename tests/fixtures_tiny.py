"""Shared fixtures for the workloads' tests: the tiny profile's assets, built offline.

Import the fixtures you need into a test module: `from fixtures_tiny import tiny_assets`.
"""


import pytest


@pytest.fixture(scope="session")
def tiny_assets():
    """The warm-started tiny model, tokenizer, training rows and benchmark (cached in the
    user's cache dir, or OPSDCTL_CACHE_DIR): the model the package ships, the data generated in
    seconds, exactly what `opsdctl demo` and the tiny profile's stages read."""
    from opsdkit.tiny import ensure_tiny_assets

    return ensure_tiny_assets()


@pytest.fixture(scope="session")
def untrained_tiny_model(tmp_path_factory):
    """A random-weight tiny Qwen3 model + tokenizer directory (seconds to build)."""
    from opsdkit.tiny import build_untrained_tiny

    return build_untrained_tiny(tmp_path_factory.mktemp("untrained-tiny"))


@pytest.fixture(autouse=False)
def one_thread():
    """Keep torch to one thread: CI has 2 cores and tests may run subprocesses beside."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
