"""Output assembly: the generated track and its turn timings into the finished episode files (CLI and workers).

loudness       normalize_loudness (-16 LUFS under a -1 dBFS ceiling), silence
transcripts    chapters_from_turns, format_srt, format_vtt, chapters_document
episode        Episode, write_episode (every format and side file, atomically as a set), OutputError
audio_encoding each audio file encoded a second at a time in a child process (a crash fails one file)
"""
