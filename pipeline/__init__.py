"""The engine and generation: the continuous-batching engine (`pipeline.engine`), the one seam through which the
CLI, the worker and regeneration run a plan's segments on it (`pipeline.generation`), and laying a plan's
generated segments out as one track (`pipeline.podcast`). Imports no web, queue or database code."""
