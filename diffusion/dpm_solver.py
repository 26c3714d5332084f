"""Batched DPM-Solver++ (2M) with v-prediction and classifier-free guidance, for VibeVoice's diffusion head.

transformers' `generate()` samples each frame with diffusers' `DPMSolverMultistepScheduler`: a Python
object whose `step()` keeps a history list, converts timesteps on the host and works on one batch at a
time. Here the same arithmetic is folded into per-step coefficients computed once per step count, so a
frame's whole denoising loop is a fixed sequence of tensor operations: no host synchronisation, no
Python state between steps, and every slot that asked for a frame in this engine step is sampled in one
batch (each with its own guidance scale). That is what lets a CUDA graph capture it.

The schedule is the one the checkpoints ship: 1000 training steps, the `squaredcos_cap_v2` (cosine)
betas, `linspace` timestep spacing, DPM-Solver++ of order 2 with the midpoint rule, first order at the
first and the last step, and a final sigma of zero. A test checks the result against diffusers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
from torch import nn

TRAIN_TIMESTEPS = 1000
_MAX_BETA = 0.999


@dataclass(frozen=True)
class SolverSchedule:
    """Per-step constants of one step count, as float64 numpy arrays (moved to a device on use).

    Step i maps the sample x and the model's v-prediction to the next sample:
        x0 = alpha[i] * x - sigma[i] * v
        x  = sample_coef[i] * x + x0_coef[i] * x0 + history_coef[i] * (x0 - previous x0)
    """

    timesteps: np.ndarray
    alpha: np.ndarray
    sigma: np.ndarray
    sample_coef: np.ndarray
    x0_coef: np.ndarray
    history_coef: np.ndarray

    @property
    def steps(self) -> int:
        return len(self.timesteps)


def _cosine_alphas_cumprod() -> np.ndarray:
    """ᾱ of the `squaredcos_cap_v2` schedule, built from betas as diffusers builds it."""

    def alpha_bar(t: float) -> float:
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2

    betas = [
        min(1 - alpha_bar((i + 1) / TRAIN_TIMESTEPS) / alpha_bar(i / TRAIN_TIMESTEPS), _MAX_BETA)
        for i in range(TRAIN_TIMESTEPS)
    ]
    return np.cumprod(1.0 - np.asarray(betas, dtype=np.float32), dtype=np.float32).astype(np.float64)


@lru_cache(maxsize=32)
def solver_schedule(steps: int) -> SolverSchedule:
    """The DPM-Solver++ 2M constants for `steps` denoising steps (1 to 1000)."""
    if not 1 <= steps <= TRAIN_TIMESTEPS:
        raise ValueError(f"diffusion steps must be between 1 and {TRAIN_TIMESTEPS}, got {steps}")
    alphas_cumprod = _cosine_alphas_cumprod()
    all_sigmas = np.sqrt((1 - alphas_cumprod) / alphas_cumprod)
    timesteps = np.linspace(0, TRAIN_TIMESTEPS - 1, steps + 1).round()[::-1][:-1].astype(np.int64)
    sigmas = np.interp(timesteps, np.arange(len(all_sigmas)), all_sigmas)
    sigmas = np.concatenate([sigmas, [0.0]])  # the last step lands on the clean sample
    alphas = 1.0 / np.sqrt(sigmas**2 + 1.0)
    scaled_sigmas = sigmas * alphas
    with np.errstate(divide="ignore"):
        lambdas = np.log(alphas) - np.log(scaled_sigmas)  # +inf at the final sigma of zero

    sample_coef, x0_coef, history_coef = (np.zeros(steps) for _ in range(3))
    for i in range(steps):
        h = lambdas[i + 1] - lambdas[i]
        decay = -np.expm1(-h)  # 1 - e^-h, exactly 1 at the final step
        sample_coef[i] = scaled_sigmas[i + 1] / scaled_sigmas[i]
        x0_coef[i] = alphas[i + 1] * decay
        second_order = 0 < i < steps - 1
        if second_order:
            ratio = (lambdas[i] - lambdas[i - 1]) / h
            history_coef[i] = 0.5 * alphas[i + 1] * decay / ratio
    return SolverSchedule(
        timesteps=timesteps.astype(np.float64),
        alpha=alphas[:-1],
        sigma=scaled_sigmas[:-1],
        sample_coef=sample_coef,
        x0_coef=x0_coef,
        history_coef=history_coef,
    )


_CONSTANT_NAMES = ("timesteps", "alpha", "sigma", "sample_coef", "x0_coef", "history_coef")


@lru_cache(maxsize=64)
def _device_constants(steps: int, device: torch.device) -> dict[str, torch.Tensor]:
    """The schedule's constants as float32 tensors on `device`, made once.

    Copying them per call would put a host-to-device copy inside every frame, which a CUDA graph cannot
    capture; made once, a captured sampling loop only reads them. They are made outside inference mode whatever
    the first caller's mode (the engine samples under `torch.inference_mode`): a cached inference tensor would
    break every later caller that tracks gradients.
    """
    schedule = solver_schedule(steps)
    with torch.inference_mode(False):
        return {
            name: torch.as_tensor(getattr(schedule, name), device=device, dtype=torch.float32)
            for name in _CONSTANT_NAMES
        }


def sample_with_guidance(
    head: nn.Module,
    positive: torch.Tensor,
    negative: torch.Tensor,
    noise: torch.Tensor,
    guidance: torch.Tensor,
    steps: int,
) -> torch.Tensor:
    """Denoise `noise` [n, latent] conditioned on `positive`/`negative` hidden states [n, hidden].

    `guidance` [n] is each row's CFG scale: v = v_neg + scale * (v_pos - v_neg). The diffusion head sees
    the positive and negative conditions as one batch of 2n rows, as in transformers' `generate()`.
    Returns the clean latents [n, latent] in the dtype of `noise`.
    """
    device, dtype = noise.device, noise.dtype
    constants = _device_constants(steps, device)
    condition = torch.cat([positive, negative], dim=0)
    scale = guidance.to(device=device, dtype=torch.float32).unsqueeze(-1)
    rows = noise.shape[0]
    sample = noise.to(torch.float32)
    previous_x0 = torch.zeros_like(sample)
    for i in range(steps):
        timestep = constants["timesteps"][i].expand(2 * rows).to(dtype)
        velocity = head(torch.cat([sample, sample]).to(dtype), timestep, condition=condition).to(torch.float32)
        conditioned, unconditioned = velocity[:rows], velocity[rows:]
        guided = unconditioned + scale * (conditioned - unconditioned)
        x0 = constants["alpha"][i] * sample - constants["sigma"][i] * guided
        sample = (
            constants["sample_coef"][i] * sample
            + constants["x0_coef"][i] * x0
            + constants["history_coef"][i] * (x0 - previous_x0)
        )
        previous_x0 = x0
    return sample.to(dtype)
