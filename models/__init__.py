"""The VibeVoice model as voxcast loads and drives it: checkpoint layouts and loading (`checkpoint_layout`,
`loading`), a generation's inputs and outputs (`segment_io`), tiny random checkpoints for tests and `tiny-random`
(`tiny_checkpoint`, `tiny_instruct`), transformers' own `generate()` as the reference path (`reference`), and
the instruct model the drafting stage talks to (`instruct_chat`). Imports nothing of the engine above it.

Importing the package loads nothing: `segment_io`'s types (which the engine's requests carry) come without
transformers, which only the modules that load or build a model import."""
