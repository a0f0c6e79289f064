"""What one request asks of the scheduler-level vLLM runtime's stand-in model, engine and client.

A ``RequestPlan`` is data, fixed when the request is added: the sampling parameters vLLM reads
(``max_tokens``, stop token ids), what the stand-in model samples (EOS or a stop token at a given
output index), and what happens outside the scheduler (a grammar that compiles after some steps
or fails, KV blocks loaded from a remote cache asynchronously, a streamed input that arrives in
chunks). ``plan_for`` draws one from a seeded generator, as the simulator does.
"""

from __future__ import annotations

import random

import attrs


@attrs.frozen
class RequestPlan:
    """One request's behaviour (every field's default: a plain request that runs to ``max_tokens``)."""

    max_tokens: int = 8
    #: output index at which the stand-in model samples EOS (``None``: never)
    eos_at: int | None = None
    #: (output index, token id): the token is one of the request's ``stop_token_ids``; the stand-in samples it at that
    #: index (a real model samples what it samples)
    stop_at: tuple[int, int] | None = None
    #: a structured-output request: its grammar compiles after this many runtime steps (``None``: no grammar)
    grammar_steps: int | None = None
    grammar_fails: bool = False  #: the grammar does not compile (the request ends with an error)
    #: its prompt's KV blocks are loaded from a remote cache asynchronously, taking this many steps
    kv_load_steps: int | None = None
    kv_load_fails: bool = False  #: the remote load fails (the request ends with an error)
    #: after it completes (stop or length), the connector keeps its blocks this many steps more (an asynchronous send)
    kv_save_steps: int | None = None
    #: a streaming-input session: (steps after the request was added, chunk of prompt token ids) per chunk
    stream: tuple[tuple[int, tuple[int, ...]], ...] = ()
    #: the session's end is signalled this many steps after the last chunk (``None``: with the last chunk)
    stream_end_after: int | None = None

    def stand_in_only(self) -> list[str]:
        """Return the fields set that only the stand-in model and its world act on (a real engine ignores them)."""
        defaults = RequestPlan()
        fields = ("eos_at", "grammar_steps", "grammar_fails", "kv_load_steps", "kv_load_fails", "kv_save_steps",
                  "stream", "stream_end_after")  # fmt: skip
        return [name for name in fields if getattr(self, name) != getattr(defaults, name)]

    @property
    def streaming(self) -> bool:
        """Return whether this is a streaming-input session (vLLM's resumable request)."""
        return bool(self.stream) or self.stream_end_after is not None


def plan_for(seed: int, req_id: int, max_tokens: int, connector: bool) -> RequestPlan:
    """Return a request's plan drawn from its own generator (every behaviour on now and then)."""
    rng = random.Random(seed * 1_000_003 + req_id)
    eos = rng.randrange(max_tokens) if rng.random() < 0.3 else None
    stop = (rng.randrange(max_tokens), rng.randrange(900, 1000)) if rng.random() < 0.2 else None
    grammar = rng.randint(0, 3) if rng.random() < 0.2 else None
    load = rng.randint(0, 3) if connector and rng.random() < 0.3 else None
    save = rng.randint(1, 3) if connector and rng.random() < 0.2 else None
    stream: tuple[tuple[int, tuple[int, ...]], ...] = ()
    end_after = None
    if grammar is None and load is None and rng.random() < 0.15:
        at = 0
        chunks = []
        for _ in range(rng.randint(1, 2)):
            at += rng.randint(1, 6)
            chunks.append((at, tuple(rng.randrange(4, 900) for _ in range(rng.randint(1, 3)))))
        stream, end_after = tuple(chunks), rng.randint(0, 4)
    return RequestPlan(max_tokens=max_tokens, eos_at=eos, stop_at=stop, grammar_steps=grammar,
                       grammar_fails=grammar is not None and rng.random() < 0.2, kv_load_steps=load,
                       kv_load_fails=load is not None and rng.random() < 0.2, kv_save_steps=save, stream=stream,
                       stream_end_after=end_after)  # fmt: skip
