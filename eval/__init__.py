"""avg@k evaluation workload: `python -m eval`.

cli.py (arguments, validation) -> runner.py (parent: plan, queue, samples.jsonl, result.json)
-> worker.py (one process per GPU or CPU slot) -> backends.py (HF decode loop or vLLM engine)
-> grading.py (last box + math-verify). plan.py holds the seeds, micro-batches and rounds.
Importing this package imports nothing heavy.
"""
