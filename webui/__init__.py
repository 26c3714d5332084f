"""The Gradio studio, a client of the api over HTTP. Empty until the web UI lands; see docs/architecture.md."""
