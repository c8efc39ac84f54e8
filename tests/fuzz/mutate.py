"""Mutators: turn seed inputs into hostile variants, byte-wise and (for text formats) token-wise.

Entry point: :func:`mutate`. Deterministic for a given ``random.Random``.
"""

from __future__ import annotations

import random
import re
import struct

# Values that break size and index checks: zero, signs, powers of two at type boundaries.
INTERESTING_INTS = [0, 1, 2, 7, 8, 16, 255, 256, 65535, 65536, (1 << 31) - 1, 1 << 31,
                    (1 << 32) - 1, 1 << 32, 1 << 40, (1 << 62), (1 << 63) - 1, 1 << 63,
                    (1 << 64) - 1, -1, -2, -(1 << 31), -(1 << 63)]
INTERESTING_TOKENS = [
    b"0", b"-1", b"1e309", b"2147483648", b"9223372036854775808", b"4294967296", b"-0",
    b"NaN", b"null", b"true", b'""', b"[]", b"{}", b'"\\ud800"', b'"\\u0000"', b"\xd9\xa1",
    b"[" * 2000, b"(" * 2000, b"{" * 2000, b"9" * 5000, b"%0", b"@main", b"meta[relay.Constant][0]",
    b"fn () { 1 }", b"Tensor[(?, 2), float32]", b"_", b"..", b"/", b"\x00", b"\xff\xfe",
]
_TOKEN = re.compile(rb"[A-Za-z_][A-Za-z0-9_.]*|-?[0-9]+(?:\.[0-9]*)?|\"(?:[^\"\\]|\\.)*\"|\S")


def _flip_bit(data: bytearray, rng: random.Random) -> None:
    if data:
        i = rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)


def _set_byte(data: bytearray, rng: random.Random) -> None:
    if data:
        data[rng.randrange(len(data))] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])


def _set_int(data: bytearray, rng: random.Random) -> None:
    """Overwrite 1/2/4/8 bytes with an interesting little-endian integer (a length, a count)."""
    width = rng.choice([1, 2, 4, 8])
    if len(data) < width:
        return
    value = rng.choice(INTERESTING_INTS) % (1 << (8 * width))
    at = rng.randrange(len(data) - width + 1)
    if width == 8 and at % 8 and rng.random() < 0.7:
        at -= at % 8  # binary formats align most fields to 8 bytes
    data[at:at + width] = value.to_bytes(width, "little")


def _insert(data: bytearray, rng: random.Random) -> None:
    at = rng.randrange(len(data) + 1)
    data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))


def _delete(data: bytearray, rng: random.Random) -> None:
    if data:
        at = rng.randrange(len(data))
        del data[at:at + rng.randrange(1, 64)]


def _duplicate(data: bytearray, rng: random.Random) -> None:
    if data:
        at = rng.randrange(len(data))
        chunk = data[at:at + rng.randrange(1, 256)]
        where = rng.randrange(len(data) + 1)
        data[where:where] = chunk * rng.choice([1, 2, 16])


def _truncate(data: bytearray, rng: random.Random) -> None:
    if data:
        del data[rng.randrange(len(data)):]


def _float(data: bytearray, rng: random.Random) -> None:
    if len(data) >= 8:
        at = rng.randrange(len(data) - 7)
        data[at:at + 8] = struct.pack("<d", rng.choice([float("nan"), float("inf"), -0.0, 1e308]))


BYTE_MUTATORS = [_flip_bit, _set_byte, _set_int, _set_int, _insert, _delete, _duplicate,
                 _truncate, _float]


def _tokens(data: bytearray) -> list[re.Match]:
    return list(_TOKEN.finditer(bytes(data)))


def _replace_token(data: bytearray, rng: random.Random) -> None:
    tokens = _tokens(data)
    if tokens:
        tok = rng.choice(tokens)
        data[tok.start():tok.end()] = rng.choice(INTERESTING_TOKENS + [t.group() for t in tokens])


def _swap_tokens(data: bytearray, rng: random.Random) -> None:
    tokens = _tokens(data)
    if len(tokens) > 1:
        a, b = sorted(rng.sample(tokens, 2), key=lambda t: t.start())
        if a.end() <= b.start():
            data[b.start():b.end()], data[a.start():a.end()] = a.group(), b.group()


def _duplicate_line(data: bytearray, rng: random.Random) -> None:
    lines = bytes(data).split(b"\n")
    i = rng.randrange(len(lines))
    lines[i:i] = [lines[i]] * rng.choice([1, 2, 50])
    data[:] = b"\n".join(lines)


def _drop_token(data: bytearray, rng: random.Random) -> None:
    tokens = _tokens(data)
    if tokens:
        tok = rng.choice(tokens)
        del data[tok.start():tok.end()]


TEXT_MUTATORS = [_replace_token, _replace_token, _swap_tokens, _duplicate_line, _drop_token]


def mutate(seed: bytes, rng: random.Random, text: bool, corpus: list[bytes]) -> bytes:
    """One to four mutations of ``seed`` (sometimes spliced with another corpus entry)."""
    data = bytearray(seed)
    if corpus and rng.random() < 0.1:
        other = rng.choice(corpus)
        cut_a, cut_b = rng.randrange(len(data) + 1), rng.randrange(len(other) + 1)
        data = data[:cut_a] + bytearray(other[cut_b:])
    mutators = BYTE_MUTATORS + TEXT_MUTATORS * 2 if text else BYTE_MUTATORS
    for _ in range(rng.choice([1, 1, 2, 3, 4])):
        rng.choice(mutators)(data, rng)
    return bytes(data[: 4 << 20])  # cap inputs at 4 MiB
