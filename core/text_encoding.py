"""What a data file's bytes are when they are not UTF-8, named for the person who saved the file.

Prompt, label and score files are read as UTF-8. Without this, a file saved as "Unicode" by a
Windows editor (UTF-16) had every line quarantined as "not UTF-8 (byte 0)" and the run then said
it "holds no rows"; a Latin-1 line said "byte 42" and nothing of which character it held. Here the
encoding is told from the byte-order mark, or from the zero bytes of UTF-16 text without one, and a
line that is not UTF-8 says what its first bad byte would be in Latin-1 / Windows-1252. A UTF-8
byte-order mark is not an error: the readers drop it (`strip_utf8_bom`).
"""

from __future__ import annotations

import codecs
from pathlib import Path

# longest first: UTF-32-LE's mark begins with UTF-16-LE's
_MARKS = [(codecs.BOM_UTF32_LE, "UTF-32", "little-endian"), (codecs.BOM_UTF32_BE, "UTF-32", "big-endian"),
          (codecs.BOM_UTF16_LE, "UTF-16", "little-endian"), (codecs.BOM_UTF16_BE, "UTF-16", "big-endian")]
SNIFF_BYTES = 4096  # bytes read from a file's head to tell its encoding


def foreign_encoding(head: bytes) -> tuple[str, str] | None:
    """(codec for iconv, description) of bytes that are a UTF-16 or UTF-32 file's head, or None (UTF-8,
    ASCII, or bytes this cannot name). Without a byte-order mark, UTF-16 is told by ASCII text's zero
    bytes: most bytes at odd (little-endian) or even (big-endian) offsets zero, almost none at the others."""
    for mark, codec, order in _MARKS:
        if head.startswith(mark):
            return codec, f"{codec} ({order}, with a byte-order mark)"
    sample = head[:SNIFF_BYTES]
    half = len(sample) // 2
    if half >= 2:
        even, odd = sample[0::2].count(0), sample[1::2].count(0)
        if odd > 0.4 * half and even < 0.05 * half:
            return "UTF-16LE", "UTF-16 (little-endian, without a byte-order mark)"
        if even > 0.4 * half and odd < 0.05 * half:
            return "UTF-16BE", "UTF-16 (big-endian, without a byte-order mark)"
    return None


def file_encoding_problem(path: Path) -> str | None:
    """'NAME is UTF-16 (…), not UTF-8: convert it, e.g. `iconv …`' for a local file in a foreign
    encoding; None for UTF-8 (with or without its mark), for a file that cannot be read, or a folder."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError:
        return None
    found = foreign_encoding(head)
    if found is None:
        return None
    codec, description = found
    name = Path(path).name
    converted = f"{Path(path).stem}.utf8{Path(path).suffix}"
    return (f"{name} is {description}, not UTF-8: convert it, e.g. "
            f"`iconv -f {codec} -t UTF-8 {name} > {converted}`")


def undecodable(raw: bytes, exc: UnicodeDecodeError) -> str:
    """Why a line is not UTF-8, naming its first bad byte and what that byte is in Latin-1 /
    Windows-1252 (the usual encoding of such a file), e.g. "invalid UTF-8 at byte 42 (0xe9, 'é' in
    Latin-1/Windows-1252: save the file as UTF-8)"."""
    byte = raw[exc.start : exc.start + 1]
    try:
        guess = byte.decode("cp1252")
    except UnicodeDecodeError:
        guess = byte.decode("latin-1")
    shown = f"{guess!r} in Latin-1/Windows-1252" if guess.isprintable() else "unprintable in Latin-1"
    return f"invalid UTF-8 at byte {exc.start} (0x{byte.hex()}, {shown}: save the file as UTF-8)"


def strip_utf8_bom(raw: bytes) -> bytes:
    """A line without the UTF-8 byte-order mark some editors write at a file's start."""
    return raw[len(codecs.BOM_UTF8):] if raw.startswith(codecs.BOM_UTF8) else raw
