"""opsdctl: find a better OPSD training recipe inside a hard compute budget.

The control plane. It never imports torch, transformers or vllm, so the CLI starts fast;
the workloads (trainer/, eval/) run as separate processes behind the stage contract.
"""

__version__ = "0.1.0"
