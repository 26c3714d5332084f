"""The worker process's one engine: loaded once, warmed up, stepping in its background thread, shared by every task.

A worker process runs one engine (one model, one GPU); every task thread hands all its job's pending segments to
it at once, each tagged with the job, its queue and its priority, and the engine batches them across jobs: rows
go round-robin between jobs, interactive work first. `VOXCAST_ENGINE_RUNNER_WRAPPER` names a callable that wraps
the model runner before the engine gets it (as vLLM's `worker_extension_cls` extends its workers): the fault tests
inject their faults through it, and production leaves it unset.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch

from core.settings import Settings
from models.loading import LoadedModel, load_model
from models.segment_io import chars_per_token
from pipeline.engine.engine import Engine, EngineConfig, EngineLoad, Runner
from pipeline.engine.factory import engine_for_model, engine_slots, step_options
from pipeline.engine.runner import ModelRunner
from pipeline.engine.warm_up import prepare_to_serve
from script_text.plan import ModelContext

RunnerWrapper = Callable[[ModelRunner, LoadedModel], Runner]

_lock = threading.Lock()


def shared_engine(settings: Settings) -> Engine:
    """The process's engine, started on first use (model loaded, warmed up, stepping thread running), then shared.

    The online policy: a worker serves interactive jobs and listeners beside batch work.
    """
    config = EngineConfig(
        slots=engine_slots(settings.engine_slots, settings.device),
        kv_memory=settings.engine_kv_memory,
        policy="online",
        max_graphs=settings.engine_max_graphs,
        **step_options(settings.engine_step),  # type: ignore[arg-type]  # its dict is untyped; the engine's to type
    )
    if settings.engine_interactive_slowdown is not None:
        config = dataclasses.replace(config, interactive_slowdown=settings.engine_interactive_slowdown)
    source = settings.worker_model or settings.model
    with _lock:
        return _start_once(source, settings.device, settings.dtype, config, settings.engine_runner_wrapper)


@functools.cache
def _start_once(
    source: str, device: str | None, dtype: str | None, config: EngineConfig, runner_wrapper: str | None
) -> Engine:
    wrap = None if runner_wrapper is None else _import_wrapper(runner_wrapper)
    engine = engine_for_model(load_model(source, device=device, dtype=dtype), config, wrap_runner=wrap)
    prepare_to_serve(engine)  # graphs captured and the fast path checked now, not while a listener waits
    engine.start()
    return engine


def _import_wrapper(path: str) -> RunnerWrapper:
    """`module:callable` (checked for its shape by `Settings`), imported."""
    module, _, name = path.partition(":")
    wrapper: RunnerWrapper = getattr(importlib.import_module(module), name)
    return wrapper


@dataclass(frozen=True)
class WorkerEngine:
    """What a worker's engine runs on, and how full it is right now."""

    model: str  # the source it was loaded from: hub id, folder or "tiny-random"
    device: str  # the GPU's name (e.g. "NVIDIA H200"), or "cpu"
    dtype: str
    chars_per_token: float  # its tokenizer's rate on English (for the api's estimate of prompt lengths)
    load: EngineLoad
    context: ModelContext  # its model's name and context, which the api refuses a generation past


def worker_engine(engine: Engine) -> WorkerEngine:
    """A snapshot of the engine's model and occupancy, safe to take from any thread while it steps."""
    loaded = engine.loaded
    assert loaded is not None  # a worker's engine is built from a loaded model
    device = torch.cuda.get_device_name(loaded.device) if loaded.device.type == "cuda" else loaded.device.type
    dtype = str(loaded.dtype).removeprefix("torch.")
    return WorkerEngine(loaded.source, device, dtype, _chars_per_token(engine), engine.load(), loaded.context)


@functools.cache
def _chars_per_token(engine: Engine) -> float:
    assert engine.loaded is not None  # as in `worker_engine`
    return chars_per_token(engine.loaded)
