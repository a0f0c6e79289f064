"""Stage runtimes, side by side: ``sim`` (the embedded default), ``vllm`` (real vLLM v1), and ``process`` (any of
them in a child process of its own).

Each subpackage is the only place that imports its engine; the orchestrator core, the drivers
and the conformance kit import none of them.
"""
