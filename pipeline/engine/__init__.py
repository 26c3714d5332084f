"""The serving engine: request slots, a scheduler and a batched model runner (see engine.py)."""

from pipeline.engine.engine import Engine, EngineConfig, StepTiming
from pipeline.engine.requests import EngineEvent, EventKind, GenerationRequest, PromptInputs, Replay, RequestHandle

__all__ = [
    "Engine",
    "EngineConfig",
    "EngineEvent",
    "EventKind",
    "GenerationRequest",
    "PromptInputs",
    "Replay",
    "RequestHandle",
    "StepTiming",
]
