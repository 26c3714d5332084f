"""The FastAPI service (jobs, voices, admin, SSE). Empty until the podcast service lands; see docs/architecture.md."""
