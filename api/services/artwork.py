"""A show's artwork, checked as podcast directories check it: a square JPEG or PNG of 1400 to 3000 pixels a side, in
RGB (Apple Podcasts' rules; Spotify and the others take what Apple takes).

The image is read with Pillow: its header first (format and size, with no pixels decoded, so a 60,000-pixel-wide
"image" costs nothing), then decoded whole once, to refuse a file cut short or corrupt before it is stored. Pillow
parses bytes anyone may send, and says what it dislikes with whatever exception its parser raises (a `ValueError`
for a compressed PNG chunk that inflates past its limit, a `SyntaxError` for a broken chunk, an `OSError` or
`EOFError` for a file cut short): every one of them is the upload's problem, a 422 that says it in words
(`_unreadable`), never a 500 and never a Python repr.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError
from PIL.PngImagePlugin import MAX_TEXT_CHUNK

from api.errors import InvalidInput, Problem

MIN_ARTWORK_PIXELS = 1400
MAX_ARTWORK_PIXELS = 3000
MAX_ARTWORK_BYTES = 8 * 1024 * 1024  # a 3000-pixel PNG of a photograph is about 6 MiB
ARTWORK_FORMATS = {"JPEG": ("jpg", "image/jpeg"), "PNG": ("png", "image/png")}  # Pillow's name: extension, type
ARTWORK_MEDIA_TYPES = dict(ARTWORK_FORMATS.values())  # extension: media type
RGB_MODES = ("RGB", "RGBA", "P")  # Pillow's modes of RGB colour (a palette's entries are RGB): not grey, not CMYK


@dataclass(frozen=True)
class Artwork:
    """An image that passed the checks: its bytes as uploaded, its extension (`jpg`, `png`) and its side in pixels."""

    data: bytes
    extension: str
    pixels: int

    @property
    def media_type(self) -> str:
        return ARTWORK_MEDIA_TYPES[self.extension]


def checked_artwork(data: bytes, field: str = "file") -> Artwork:
    """The artwork, or `InvalidInput` naming `field`, what is wrong and what a directory takes."""
    rule = f"a square JPEG or PNG of {MIN_ARTWORK_PIXELS} to {MAX_ARTWORK_PIXELS} pixels a side, in RGB"
    if len(data) > MAX_ARTWORK_BYTES:
        raise _refused(field, f"the artwork is over {MAX_ARTWORK_BYTES // (1024 * 1024)} MiB; podcast apps want {rule}")
    try:
        with Image.open(io.BytesIO(data)) as image:
            kind, (width, height), mode = image.format, image.size, image.mode
            problem = _shape_problem(kind, width, height, mode)
            if problem is None:
                image.load()  # every pixel decoded once: a file cut short or corrupt is refused here, not in an app
    except Exception as error:  # noqa: BLE001 -- whatever Pillow's parsers raise, the upload is what is wrong
        raise _refused(
            field, f"the artwork is not an image Pillow can read: {_unreadable(error)}; send {rule}"
        ) from error
    if problem is not None:
        raise _refused(field, f"{problem}; podcast directories take {rule}")
    assert kind is not None  # `_shape_problem` refused any other
    return Artwork(data, ARTWORK_FORMATS[kind][0], width)


def _shape_problem(kind: str | None, width: int, height: int, mode: str) -> str | None:
    """What in the image's header a directory refuses; None when nothing."""
    if kind not in ARTWORK_FORMATS:
        return f"the artwork is {kind or 'an unknown'} image"
    if width != height or not MIN_ARTWORK_PIXELS <= width <= MAX_ARTWORK_PIXELS:
        return f"the artwork is {width}×{height} pixels"
    if mode not in RGB_MODES:
        return f"the artwork's colours are {mode}, not RGB"
    return None


_REPR = re.compile(r"<[^<>]*\bat 0x[0-9a-fA-F]+>")  # "<_io.BytesIO object at 0x7f…>", which says nothing to a person


def _unreadable(error: Exception) -> str:
    """Why Pillow could not read an upload, in words."""
    message = str(error)
    if isinstance(error, UnidentifiedImageError):
        return "its first bytes are neither a JPEG's nor a PNG's"
    if isinstance(error, Image.DecompressionBombError):
        return "it claims far more pixels than any artwork has, as a decompression bomb does"
    if isinstance(error, ValueError) and ("Decompressed data too large" in message or "text chunks" in message):
        return (
            f"a compressed chunk in it (text or a colour profile) inflates past the {MAX_TEXT_CHUNK >> 20} MiB Pillow "
            "allows, as a decompression bomb does; save the image again without its metadata"
        )
    if isinstance(error, EOFError) or "truncated" in message:
        return "it is cut short or damaged"
    return f"it is damaged ({_REPR.sub('the upload', message) or type(error).__name__})"


def _refused(field: str, message: str) -> InvalidInput:
    return InvalidInput([Problem(field, message)])
