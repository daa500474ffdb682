#!/usr/bin/env python3
"""Writes tests/tokenizer/data/pre_tokenizer_splits.txt: the pieces Python's `regex` module (an
independent regex engine with its own Unicode tables; Debian: python3-regex) cuts from test
strings with each pre-tokenizer's published split regexes, applied in turn to every piece
("isolated" splits, as Hugging Face's Split pre-tokenizer and llama.cpp do). test_pre_tokenizer
compares inferkit's SplitRegex-based PreTokenizer with these pieces.

Patterns are the published ones in the forms llama.cpp runs (case-insensitive contractions
written as '[sS]...). Strings are hand-picked cases plus random strings drawn from a pool of
characters of every general category; characters whose category differs between the regex
module's Unicode tables and the UCD 15.0 of /usr/share/unicode (Debian's unicode-data, what
inferkit's tables come from) are left out of the pool, so the vectors test the splitting, not a
Unicode version.

Line format: name TAB hex(text) TAB comma-separated hex(piece).
Usage: tests/tokenizer/make_pre_tokenizer_vectors.py   (needs: pip install regex, or python3-regex)
"""
import os
import random

import regex

here = os.path.dirname(os.path.abspath(__file__))
out = os.path.join(here, "data", "pre_tokenizer_splits.txt")

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# DeepSeek LLM's tokenizer.json, its literal characters as published.
DS_LETTERS = ("\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
              "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
              "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
              "\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
              "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
              "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102"
              "\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
              "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"
              "\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06"
              "\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
              "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"
              "\U0001e900-\U0001e943]+")
DS_PUNCT = "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"
DS_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"

PRE = {
    "default": [r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
    "gpt-2": [GPT2],
    "llama-bpe": [LLAMA3],
    "qwen2": [QWEN2],
    "deepseek-llm": ["[\r\n]", DS_LETTERS, DS_PUNCT, r"\s+$", DS_CJK, r"\p{N}+"],
    "deepseek-coder": ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", DS_CJK, r"\p{N}"],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"],
    "starcoder": [r"\p{N}", GPT2],
}
compiled = {k: [regex.compile(p) for p in v] for k, v in PRE.items()}


def split(name, text):
    pieces = [text]
    for r in compiled[name]:
        nxt = []
        for p in pieces:
            last = 0
            for m in r.finditer(p):
                if m.end() == m.start():
                    continue
                if m.start() > last:
                    nxt.append(p[last:m.start()])
                nxt.append(p[m.start():m.end()])
                last = m.end()
            if last < len(p):
                nxt.append(p[last:])
        pieces = nxt
    return pieces


# UCD 15.0 categories, to keep the pool to characters both engines classify alike.
ucd = {}
with open("/usr/share/unicode/UnicodeData.txt", encoding="utf-8") as f:
    first = None
    for line in f:
        fl = line.split(";")
        cp, name, gc = int(fl[0], 16), fl[1], fl[2]
        if name.endswith(", First>"):
            first = cp
            continue
        if name.endswith(", Last>"):
            for c in range(first, cp + 1):
                ucd[c] = gc
            continue
        ucd[cp] = gc


def agrees(cp):
    gc = ucd.get(cp, "Cn")
    ch = chr(cp)
    for cls, prefix in (("L", "L"), ("N", "N"), ("P", "P"), ("M", "M"), ("S", "S")):
        if bool(regex.fullmatch(r"\p{%s}" % cls, ch)) != gc.startswith(prefix):
            return False
    return bool(regex.fullmatch(r"\p{%s}" % gc, ch))


rng = random.Random(27)
pool = list("abcXYZ sst'''\t\n\r\r\n  0123456789!?.,;:-_()[]{}<>$+=^~|`\"#%&*/\\@")
pool += ["'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'D", "  ", "   ", "\n\n", " \n", "\r\n"]
for lo, hi, n in [(0x00A0, 0x024F, 40), (0x0370, 0x052F, 30), (0x0590, 0x06FF, 20), (0x0900, 0x097F, 10),
                  (0x0E00, 0x0E7F, 8), (0x1E00, 0x1FFF, 30), (0x2000, 0x206F, 30), (0x2070, 0x218F, 20),
                  (0x2460, 0x24FF, 6), (0x3000, 0x303F, 10), (0x3040, 0x30FF, 10), (0x4E00, 0x9FFF, 30),
                  (0xAC00, 0xD7A3, 10), (0xFF00, 0xFFEF, 20), (0x1F300, 0x1F6FF, 15), (0x10400, 0x104FF, 8),
                  (0x0800, 0x083F, 6), (0x1D400, 0x1D7FF, 6), (0x0300, 0x036F, 8)]:
    cps = [c for c in range(lo, hi + 1) if c in ucd and agrees(c)]
    pool += [chr(c) for c in rng.sample(cps, min(n, len(cps)))]
pool += [chr(c) for c in (0x2028, 0x2029, 0x1680, 0x205F, 0x202F, 0x0085, 0x000B, 0x000C, 0x00B2, 0x0660, 0x2167,
                          0x00BD, 0x212A, 0x2126, 0x1FBE, 0x00B5, 0x00AD, 0x200B, 0xFEFF)]
pool = [p for p in pool if all(agrees(ord(ch)) for ch in p)]

fixed = [
    "", " ", "  ", "\t", "\n", "\n\n\n", " \n \n", "Hello world", " Hello World!", "So, y'know! Where're they?",
    "they've 'said she's here, 'VE it? 'S fine I'd say, 'LL we go? You'Re o'Ll",
    "3 33 333 3333 33333 333333 1234567", "3.3 3..3 3...3", "x  y   z    \n  w", "a\r\nb\rc\n\nd",
    "   leading", "trailing   ", "tab\tseparated\t\tvalues", "\u00a0nbsp\u00a0", "\u3000\u3000ideographic",
    "rocket 🚀 (face) 😶\u200d🌫️ ✅", "我们在pear公司8675309年～", "съвсем друго нещо", "Müller ø ö ú",
    "!!!!!! ?????? ...... ''''''", "```\"\"\"\"", "------=======", "  \t \t\t \t\n  ", "𝓗𝓮𝓵𝓵𝓸 ℌ𝔢𝔩𝔩𝔬",
    "ǅungla Ǆ ǆ", "Ωmega K-elvin ώ", "١٢٣ ٤٥", "x²+y³ ½ Ⅻ", "a'sb'tc", "a's b's", "'", "''", "' s",
]
lines = []
for name in PRE:
    texts = list(fixed)
    for _ in range(150):
        n = rng.randint(1, 24)
        texts.append("".join(rng.choice(pool) for _ in range(n)))
    for t in texts:
        pieces = split(name, t)
        assert "".join(pieces) == t
        lines.append("%s\t%s\t%s" % (name, t.encode().hex(), ",".join(p.encode().hex() for p in pieces)))
os.makedirs(os.path.dirname(out), exist_ok=True)
with open(out, "w") as f:
    f.write("\n".join(lines) + "\n")
print("%s: %d cases, regex %s" % (out, len(lines), regex.__version__))
