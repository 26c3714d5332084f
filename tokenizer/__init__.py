"""Audio on the way into the model: voice-prompt preparation (and, with the engine, the streaming codecs)."""
