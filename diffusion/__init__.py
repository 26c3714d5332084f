"""The batched DPM-Solver++ sampler of the serving engine. Until it lands, sampling is transformers' own
(diffusers' `DPMSolverMultistepScheduler` inside `generate()`); see docs/architecture.md."""
