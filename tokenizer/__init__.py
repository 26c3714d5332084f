"""VibeVoice's speech tokenizer, as voxcast feeds and streams it: voice-prompt audio on the way in
(`voice_prompt`: any recording to 24 kHz mono levelled samples) and the acoustic decoder's and semantic encoder's
streaming conv states pooled over the engine's rows (`streaming`). Its rates are `core.audio_rates`."""
