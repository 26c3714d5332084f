"""An episode's ID3 tag for its MP3: title, show, author, episode number, artwork, and chapters as CHAP/CTOC frames.

The tag is built on its own, as the bytes that go in front of the MP3's audio frames (an ID3v2 tag is a prefix of
the file: `tagged = tag + audio`), so whoever serves the episode can tag it with what is true when it is served: a
show's title or artwork may change long after the episode was assembled. Written as ID3v2.3, which every podcast app
and tag reader reads (v2.4 is not read by some Apple software), with mutagen; the same tag contents give the same
bytes, so a tagged file's length and validators stay put until what it says changes.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

from mutagen.id3 import APIC, CHAP, COMM, CTOC, TALB, TCON, TIT2, TLEN, TPE1, TRCK, CTOCFlags, Encoding, PictureType
from mutagen.id3 import ID3 as ID3Tag

from assembly.transcripts import Chapter

ID3_HEADER_BYTES = 10
_NO_OFFSET = 0xFFFFFFFF  # CHAP's byte offsets: unused, the times say where a chapter is
_TABLE_OF_CONTENTS_ID = "toc"


@dataclass(frozen=True)
class EpisodeTags:
    """What an episode's MP3 says of itself. `artwork` is the image's bytes and `artwork_type` its media type."""

    title: str
    seconds: float
    chapters: tuple[Chapter, ...] = ()
    show: str | None = None
    author: str | None = None
    number: int | None = None
    description: str | None = None
    artwork: bytes | None = None
    artwork_type: str | None = None


def id3_tag(tags: EpisodeTags) -> bytes:
    """The ID3v2.3 tag of an episode, with no padding: put it in front of the MP3's audio frames."""
    tag = ID3Tag()
    tag.add(TIT2(encoding=Encoding.UTF16, text=[tags.title]))
    tag.add(TLEN(encoding=Encoding.UTF16, text=[str(round(tags.seconds * 1000))]))
    tag.add(TCON(encoding=Encoding.UTF16, text=["Podcast"]))
    if tags.show:
        tag.add(TALB(encoding=Encoding.UTF16, text=[tags.show]))
    if tags.author:
        tag.add(TPE1(encoding=Encoding.UTF16, text=[tags.author]))
    if tags.number is not None:
        tag.add(TRCK(encoding=Encoding.UTF16, text=[str(tags.number)]))
    if tags.description:
        tag.add(COMM(encoding=Encoding.UTF16, lang="eng", desc="", text=[tags.description]))
    if tags.artwork is not None:
        tag.add(
            APIC(
                encoding=Encoding.UTF16,
                mime=tags.artwork_type or "image/jpeg",
                type=PictureType.COVER_FRONT,
                desc="Cover",
                data=tags.artwork,
            )
        )
    _add_chapters(tag, tags.chapters)
    buffer = io.BytesIO()
    tag.save(buffer, v2_version=3, padding=lambda _info: 0)
    return buffer.getvalue()


def _add_chapters(tag: ID3Tag, chapters: Sequence[Chapter]) -> None:
    """One CHAP frame per chapter (its times in milliseconds, its title in a TIT2), and the CTOC that lists them in
    order: the ID3 chapter frame addendum's layout, which podcast apps read."""
    if not chapters:
        return
    element_ids = [f"chp{number}" for number in range(len(chapters))]
    tag.add(
        CTOC(
            element_id=_TABLE_OF_CONTENTS_ID,
            flags=CTOCFlags.TOP_LEVEL | CTOCFlags.ORDERED,
            child_element_ids=element_ids,
            sub_frames=[TIT2(encoding=Encoding.UTF16, text=["Chapters"])],
        )
    )
    for element_id, chapter in zip(element_ids, chapters, strict=True):
        tag.add(
            CHAP(
                element_id=element_id,
                start_time=round(chapter.start * 1000),
                end_time=round(chapter.end * 1000),
                start_offset=_NO_OFFSET,
                end_offset=_NO_OFFSET,
                sub_frames=[TIT2(encoding=Encoding.UTF16, text=[chapter.title])],
            )
        )


def id3_tag_size(head: bytes) -> int:
    """The size of the ID3v2 tag a file starts with, header (and footer) included; 0 when `head` (the file's first
    `ID3_HEADER_BYTES` or more) starts with none. The size is four 7-bit bytes (ID3v2's "synchsafe" integer)."""
    if len(head) < ID3_HEADER_BYTES or head[:3] != b"ID3" or any(byte & 0x80 for byte in head[6:10]):
        return 0
    size = 0
    for byte in head[6:10]:
        size = (size << 7) | byte
    has_footer = bool(head[5] & 0x10)
    return ID3_HEADER_BYTES + size + (ID3_HEADER_BYTES if has_footer else 0)
