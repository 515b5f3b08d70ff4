"""Surface forms: what a token *is*, independent of the vocabulary that holds it.

A token's surface form is the bytes it decodes to. Its normalised key is those bytes as
Unicode NFC text when they are valid UTF-8 (so a composed and a decomposed "é" are one
unit), else the raw bytes (a piece of a multi-byte character). Special tokens keep their
literal content under their own namespace, so "<|im_end|>" never equals the text "<|im_end|>".
A semantic unit id (SUID) is a 64-bit hash of the key: stable across processes, machines and
releases, so maps built anywhere agree without a central registry.
"""

from __future__ import annotations

import hashlib
import unicodedata
from functools import lru_cache

TEXT, RAW, SPECIAL = "t:", "b:", "s:"


@lru_cache(maxsize=1)
def byte_level_decoder() -> dict[str, int]:
    """The inverse of GPT-2's bytes_to_unicode: the printable character standing for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def byte_level_bytes(token: str) -> bytes | None:
    """The bytes a byte-level BPE token stands for; None if it uses characters outside the table."""
    table = byte_level_decoder()
    try:
        return bytes(table[ch] for ch in token)
    except KeyError:
        return None


def sentencepiece_bytes(token: str) -> bytes:
    """The bytes of a SentencePiece token: '▁' is a space, '<0xNN>' a single byte."""
    if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
        try:
            return bytes([int(token[3:5], 16)])
        except ValueError:
            pass
    return token.replace("\u2581", " ").encode("utf-8")


def normalised_key(surface: bytes, special: bool = False) -> str:
    """The unit a surface form denotes (see the module docstring)."""
    if special:
        return SPECIAL + surface.decode("utf-8", "replace")
    try:
        return TEXT + unicodedata.normalize("NFC", surface.decode("utf-8"))
    except UnicodeDecodeError:
        return RAW + surface.hex()


def suid(key: str) -> int:
    """The stable semantic unit id of a normalised key (never 0: 0 marks 'no token' in maps)."""
    value = int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big")
    return value or 1
