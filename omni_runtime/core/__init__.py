"""The sans-IO core: the orchestrator (client calls and runtime reports in, commands out), the commands, the
runtime protocol, pipelines, prompts, the stage adapters and request results. No I/O, no threads, no asyncio."""
