"""Scripts to audio: parsing, planning, model loading, prompts and generation. Imports no web or queue code."""
