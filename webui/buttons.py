"""Showing and hiding a button from an event: the one way the studio does it.

Gradio 6 does not draw a button that is hidden when the page loads; an update that later shows it and carries only
`visible` draws it with no text, a thin blank bar (issue 38: Confirm and Cancel of a regeneration, "Keep the new
take", "Cancel this job"). Every update therefore sends the button's label along with its visibility.
"""

from __future__ import annotations

import gradio as gr


def button_shown(button: gr.Button, visible: bool = True) -> gr.Button:
    """The update that shows (or hides) `button`, with its label, so it is drawn with its text."""
    return gr.Button(button.value, visible=visible)


def button_hidden(button: gr.Button) -> gr.Button:
    """The update that hides `button` (its label sent too: shown later, it keeps its text)."""
    return button_shown(button, visible=False)
