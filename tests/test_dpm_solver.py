"""The batched sampler against diffusers' DPMSolverMultistepScheduler, the reference `generate()` uses."""

from __future__ import annotations

import pytest
import torch
from diffusers import DPMSolverMultistepScheduler

from diffusion.dpm_solver import sample_with_guidance, solver_schedule


class TinyHead(torch.nn.Module):
    """A stand-in with the diffusion head's call signature: (noisy latents, timesteps, condition) -> v."""

    def __init__(self, latent: int = 8, hidden: int = 16) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.latent_proj = torch.nn.Parameter(torch.randn(latent, hidden, generator=generator) * 0.3)
        self.out = torch.nn.Parameter(torch.randn(hidden, latent, generator=generator) * 0.3)

    def forward(self, noisy: torch.Tensor, timesteps: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(noisy @ self.latent_proj + condition + timesteps[:, None] / 1000)
        return hidden @ self.out


def reference(head: TinyHead, positive, negative, noise, scale: float, steps: int) -> torch.Tensor:
    """transformers' loop: one scheduler, the CFG pair as a batch of 2n, the guided v for both halves."""
    scheduler = DPMSolverMultistepScheduler(beta_schedule="squaredcos_cap_v2", prediction_type="v_prediction")
    scheduler.set_timesteps(steps)
    condition = torch.cat([positive, negative])
    latent = torch.cat([noise, noise])
    half = noise.shape[0]
    for timestep in scheduler.timesteps:
        combined = torch.cat([latent[:half], latent[:half]])
        v = head(combined, timestep.repeat(combined.shape[0]).to(combined), condition)
        guided = v[half:] + scale * (v[:half] - v[half:])
        latent = scheduler.step(torch.cat([guided, guided]), timestep, latent).prev_sample
    return latent[:half]


@pytest.mark.parametrize("steps", [1, 2, 3, 5, 10, 20])
def test_matches_diffusers_for_every_step_count(steps: int) -> None:
    generator = torch.Generator().manual_seed(steps)
    head = TinyHead()
    positive, negative = torch.randn(3, 16, generator=generator), torch.randn(3, 16, generator=generator)
    noise = torch.randn(3, 8, generator=generator)
    expected = reference(head, positive, negative, noise, 1.3, steps)
    got = sample_with_guidance(head, positive, negative, noise, torch.full((3,), 1.3), steps)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-4)


def test_each_row_keeps_its_own_guidance_scale() -> None:
    generator = torch.Generator().manual_seed(7)
    head = TinyHead()
    positive, negative = torch.randn(2, 16, generator=generator), torch.randn(2, 16, generator=generator)
    noise = torch.randn(2, 8, generator=generator)
    together = sample_with_guidance(head, positive, negative, noise, torch.tensor([1.0, 3.0]), 10)
    for row, scale in enumerate((1.0, 3.0)):
        alone = reference(head, positive[row : row + 1], negative[row : row + 1], noise[row : row + 1], scale, 10)
        torch.testing.assert_close(together[row : row + 1], alone, atol=2e-5, rtol=1e-4)


def test_schedule_is_cosine_linspace_with_zero_final_sigma() -> None:
    schedule = solver_schedule(10)
    assert list(schedule.timesteps[:3]) == [999, 899, 799]
    assert schedule.x0_coef[-1] == pytest.approx(1.0) and schedule.sample_coef[-1] == 0.0
    assert schedule.history_coef[0] == 0.0 and schedule.history_coef[-1] == 0.0
    with pytest.raises(ValueError, match="between 1 and 1000"):
        solver_schedule(0)


def test_constants_made_first_under_inference_mode_serve_a_caller_that_tracks_gradients() -> None:
    """The engine samples under `torch.inference_mode`; the cached constants must not become inference tensors."""
    generator = torch.Generator().manual_seed(11)
    head = TinyHead()
    positive, negative = torch.randn(2, 16, generator=generator), torch.randn(2, 16, generator=generator)
    noise = torch.randn(2, 8, generator=generator)
    steps = 7  # a step count no other test of this module uses, so the cache is filled here
    with torch.inference_mode():
        first = sample_with_guidance(head, positive, negative, noise, torch.full((2,), 1.3), steps)
    tracked = sample_with_guidance(head, positive, negative, noise, torch.full((2,), 1.3), steps)
    assert tracked.requires_grad
    torch.testing.assert_close(tracked.detach(), first)
