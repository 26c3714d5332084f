"""The batched DPM-Solver++ sampler of the serving engine, with classifier-free guidance per row."""
