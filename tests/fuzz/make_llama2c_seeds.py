#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_llama2c (tests/fuzz/corpus/fuzz_llama2c/): tiny checkpoints
(shared and unshared classifier) and tokenizer files in the target's input layout."""
import os
import random
import struct

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fuzz_llama2c")
os.makedirs(out, exist_ok=True)
rng = random.Random(1)


def checkpoint(dim, hidden, layers, heads, kv_heads, vocab, seq, shared):
    hs = dim // heads
    kv = hs * kv_heads
    n = vocab * dim + layers * dim + layers * dim * dim + 2 * layers * kv * dim + layers * dim * dim + layers * dim
    n += 3 * layers * hidden * dim + dim + 2 * seq * (hs // 2)
    if not shared:
        n += vocab * dim
    head = struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab if shared else -vocab, seq)
    return head + struct.pack("<%df" % n, *[rng.uniform(-1, 1) for _ in range(n)])


def tokenizer_input(pieces, text, vocab):
    # FuzzedDataProvider layout: the vocabulary size from the last 2 bytes (high byte last), the
    # text from the front (ended by a backslash and another byte), the file in between.
    f = struct.pack("<i", max(len(p) for p in pieces))
    for p in pieces:
        f += struct.pack("<fi", rng.uniform(-5, 0), len(p)) + p
    t = text.replace(b"\\", b"\\\\") + b"\\x"
    return b"\x01" + t + f + bytes([vocab & 0xFF, vocab >> 8])


seeds = {
    "ckpt_shared": b"\x00" + checkpoint(4, 6, 1, 2, 1, 3, 2, True),
    "ckpt_unshared": b"\x00" + checkpoint(8, 4, 2, 2, 2, 5, 3, False),
    "ckpt_truncated": b"\x00" + checkpoint(4, 6, 1, 2, 1, 3, 2, True)[:-7],
}
byte_pieces = [b"<unk>", b"\n<s>\n", b"\n</s>\n"] + [b"<0x%02X>" % b for b in range(256)]
seeds["tok_bytes"] = tokenizer_input(byte_pieces + [b" ", b"a", b"b", b" a", b"ab"], b"ab \xc3\xa9 ba", len(byte_pieces) + 5)
seeds["tok_small"] = tokenizer_input([b" ", b"a", b"b", b"ab", b" ab"], b"abab", 5)
seeds["tok_truncated"] = tokenizer_input([b" ", b"a"], b"a", 7)
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as fh:
        fh.write(data)
