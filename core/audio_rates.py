"""VibeVoice's audio rates: 24 kHz mono, one speech-tokenizer frame per 3,200 samples, so 7.5 frames a second.

The one definition of each, for every layer: voice prompts, frame budgets and prompts, the engine's frames,
the files a worker writes, the seconds of progress the api reports, the studio's players.
"""

from __future__ import annotations

SAMPLE_RATE = 24_000  # samples a second, mono
SAMPLES_PER_FRAME = 3_200  # the acoustic tokenizer's compression ratio (`speech_tok_compress_ratio`)
# 7.5: a prompt token per frame of a voice, a generated token per frame of speech
FRAMES_PER_SECOND = SAMPLE_RATE / SAMPLES_PER_FRAME
