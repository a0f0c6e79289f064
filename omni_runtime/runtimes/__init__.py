"""Stage runtimes, side by side: ``sim`` (the embedded default), ``vllm`` (real vLLM v1) and ``diffusers`` (real
diffusion pipelines). The layers that run one of them elsewhere (a process, a Ray actor) are ``omni_runtime.hosting``.

Each subpackage is the only place that imports its engine; the orchestrator core, the drivers
and the conformance kit import none of them.
"""
