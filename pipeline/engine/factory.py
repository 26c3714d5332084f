"""An engine with VibeVoice's runner: the one place that joins the engine (request lifecycle, K/V books) to the tensors.

Kept apart from `engine.py` so that the engine, its scheduler and its block books import without the runner, the
model loader or transformers (vLLM's split: the engine owns requests, the runner owns tensors).
"""

from __future__ import annotations

from collections.abc import Callable

from core.engine_defaults import default_slots
from models.loading import LoadedModel, choose_device
from pipeline.engine.engine import Engine, EngineConfig, Runner
from pipeline.engine.runner import ModelRunner, RunnerConfig

STEP_OPTIONS: dict[str, dict[str, bool | None]] = {
    "auto": {"fixed_shapes": None, "cuda_graphs": True},
    "graphs": {"fixed_shapes": True, "cuda_graphs": True},
    "fixed": {"fixed_shapes": True, "cuda_graphs": False},
    "eager": {"fixed_shapes": False, "cuda_graphs": False},
}


def step_options(step: str) -> dict[str, bool | None]:
    """The `EngineConfig` fields a step choice sets (`VOXCAST_ENGINE_STEP`: auto, graphs, fixed or eager)."""
    return STEP_OPTIONS[step]


def engine_slots(configured: int | None, device: str | None) -> int:
    """The engine's rows: `VOXCAST_ENGINE_SLOTS` where set, else the default for the device the model will load on
    (`core.engine_defaults.default_slots`)."""
    return configured or default_slots(choose_device(device).type)


def engine_for_model(
    loaded: LoadedModel,
    config: EngineConfig | None = None,
    *,
    wrap_runner: Callable[[ModelRunner, LoadedModel], Runner] | None = None,
) -> Engine:
    """An engine with a `ModelRunner` for `loaded`, sized by `config`; `wrap_runner` (a test's fault injection, or an
    extension) gets the runner and the model and returns what the engine runs instead."""
    config = config or EngineConfig()
    runner_config = RunnerConfig(
        rows=config.slots,
        block_size=config.block_size,
        kv_memory=config.kv_memory,
        kv_blocks=config.kv_blocks,
        fixed_shapes=config.fixed_shapes,
        cuda_graphs=config.cuda_graphs,
        overlap=config.overlap,
        max_graphs=config.max_graphs,
    )
    runner = ModelRunner(loaded, runner_config)
    return Engine(runner if wrap_runner is None else wrap_runner(runner, loaded), config, loaded)
