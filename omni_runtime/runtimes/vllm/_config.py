"""Building vLLM's real v1 scheduler for one AR stage replica (no model is loaded: the scheduler needs none)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import attrs
import torch
from vllm.config import CacheConfig, KVTransferConfig, ModelConfig, ParallelConfig, SchedulerConfig, VllmConfig
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.structured_output import StructuredOutputManager

from omni_runtime.runtimes.vllm.tiny import write_tiny_llama_config

try:
    from vllm.utils.hashing import sha256
except ImportError:  # pragma: no cover - older layouts
    from vllm.utils import sha256  # type: ignore[attr-defined,no-redef]

#: the stand-in KV connector, loaded by vLLM's connector factory from this module path
CONNECTOR = ("OmniStandInConnector", "omni_runtime.runtimes.vllm._standin")


def _positive(instance: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"SchedulerOptions.{attribute.name} must be an int >= 1, not {value!r}")


@attrs.frozen
class SchedulerOptions:
    """How the replica's scheduler is configured (vLLM's own settings, named as vLLM names them)."""

    max_num_seqs: int = attrs.field(default=4, validator=_positive)
    num_blocks: int = attrs.field(default=64, validator=_positive)  #: KV cache blocks (few: KV pressure, preemption)
    block_size: int = attrs.field(default=16, validator=_positive)
    max_model_len: int = attrs.field(default=128, validator=_positive)
    max_num_batched_tokens: int = attrs.field(default=64, validator=_positive)  #: < a long prompt: chunked prefill
    enable_prefix_caching: bool = False
    kv_connector: bool = False  #: attach the stand-in KV connector (asynchronous loads, delayed frees)
    #: vLLM's GPU default: step N+1 is scheduled before step N's output is applied (``AsyncScheduler``, a batch
    #: queue of two, as ``EngineCore.step_with_batch_queue`` drives it)
    async_scheduling: bool = False
    #: the scheduler class (a subclass of vLLM's ``Scheduler``, or of ``AsyncScheduler`` with ``async_scheduling``):
    #: ``None`` is vLLM's own
    scheduler_cls: type | None = None
    model_dir: str | None = None  #: the tiny model's directory (``None``: one under the temporary directory)


def default_model_dir() -> str:
    """Return a directory holding the tiny model's config (made once per user)."""
    return str(write_tiny_llama_config(Path(tempfile.gettempdir()) / f"omni-fsm-tiny-llama-{os.getuid()}"))


def build_scheduler(options: SchedulerOptions) -> Scheduler:
    """Return a fresh scheduler configured by ``options``."""
    model_dir = options.model_dir or default_model_dir()
    model = ModelConfig(model=model_dir, dtype="float32", seed=0, skip_tokenizer_init=True,
                        max_model_len=options.max_model_len)  # fmt: skip
    scheduler = SchedulerConfig(max_num_seqs=options.max_num_seqs, max_model_len=options.max_model_len,
                                max_num_batched_tokens=options.max_num_batched_tokens, enable_chunked_prefill=True,
                                is_encoder_decoder=False,
                                disable_hybrid_kv_cache_manager=True if options.kv_connector else None)  # fmt: skip
    cache = CacheConfig(block_size=options.block_size, enable_prefix_caching=options.enable_prefix_caching)
    transfer = None
    if options.kv_connector:
        transfer = KVTransferConfig(kv_connector=CONNECTOR[0], kv_connector_module_path=CONNECTOR[1], kv_role="kv_both",
                                    kv_load_failure_policy="fail")  # fmt: skip
    config = VllmConfig(model_config=model, scheduler_config=scheduler, cache_config=cache,
                        parallel_config=ParallelConfig(), kv_transfer_config=transfer)  # fmt: skip
    spec = FullAttentionSpec(block_size=options.block_size, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=options.num_blocks, kv_cache_tensors=[],
                       kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)])  # fmt: skip
    cache.num_gpu_blocks = options.num_blocks
    cls: type[Scheduler] = options.scheduler_cls or (AsyncScheduler if options.async_scheduling else Scheduler)
    if issubclass(cls, AsyncScheduler) != options.async_scheduling:
        raise ValueError(f"SchedulerOptions: {cls.__name__} with async_scheduling={options.async_scheduling}: an "
                         f"AsyncScheduler is driven asynchronously, any other scheduler synchronously")  # fmt: skip
    return cls(vllm_config=config, kv_cache_config=kv, structured_output_manager=StructuredOutputManager(config),
               block_size=options.block_size, log_stats=False, include_finished_set=True)


_HASHER: dict[int, Any] = {}


def block_hasher(block_size: int) -> Any:
    """Return vLLM's request block hasher for ``block_size`` (prefix caching keys blocks by it)."""
    if block_size not in _HASHER:
        if not _HASHER:
            init_none_hash(sha256)
        _HASHER[block_size] = get_request_block_hasher(block_size, sha256)
    return _HASHER[block_size]


def free_blocks(scheduler: Scheduler) -> tuple[int, int]:
    """Return (free KV blocks, blocks a request could ever hold): equal when nothing holds a block."""
    pool = scheduler.kv_cache_manager.block_pool
    return pool.get_num_free_blocks(), pool.num_gpu_blocks - 1  # block 0 is vLLM's null block
