"""The studio: a Gradio app in the browser, a client of the api over HTTP only (see `webui.app`)."""
