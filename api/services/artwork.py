"""A show's artwork, checked as podcast directories check it: a square JPEG or PNG of 1400 to 3000 pixels a side, in
RGB (Apple Podcasts' rules; Spotify and the others take what Apple takes).

The image is read with Pillow: its header first (format and size, with no pixels decoded, so a 60,000-pixel-wide
"image" costs nothing), then decoded whole once, to refuse a file cut short or corrupt before it is stored.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

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
            if kind not in ARTWORK_FORMATS:
                raise _refused(field, f"the artwork is {kind or 'an unknown'} image; podcast directories take {rule}")
            if width != height or not MIN_ARTWORK_PIXELS <= width <= MAX_ARTWORK_PIXELS:
                raise _refused(field, f"the artwork is {width}×{height} pixels; podcast directories take {rule}")
            if mode not in RGB_MODES:
                raise _refused(field, f"the artwork's colours are {mode}, not RGB; podcast directories take {rule}")
            image.load()  # every pixel decoded once: a file cut short or corrupt is refused here, not in an app
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as error:
        raise _refused(field, f"the artwork is not an image Pillow can read ({error}); send {rule}") from error
    return Artwork(data, ARTWORK_FORMATS[kind][0], width)


def _refused(field: str, message: str) -> InvalidInput:
    return InvalidInput([Problem(field, message)])
