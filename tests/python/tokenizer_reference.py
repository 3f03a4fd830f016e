"""An independent llama2.c tokenizer in plain Python, written from the file format and the encoding rules,
and the generator of the committed reference ids (tests/data/tokenizer/*.json) the C++ and Python tests
pin orbit's tokenizer against.

Format (llama2.c's tokenizer.bin / tok512.bin): int32 max_token_length, then per id, in id order, a float32
merge score, an int32 byte length and that many bytes of the piece. All little-endian.

Encoding rules (what llama2.c's sampler program does):
  1. BOS (id 1) first when asked.
  2. A "dummy prefix": the piece " " is emitted before the text, unless the text is empty.
  3. The text is split into UTF-8 code points: a lead byte plus the continuation bytes (10xxxxxx) that
     follow it, at most 4 bytes per group; a stray continuation byte after a full group of 4 starts a new
     group. A group that is a piece becomes that id; otherwise each of its bytes becomes the id of the
     piece "<0xNN>" (byte fallback).
  4. Merging: among adjacent pairs whose concatenation is a piece, take the one with the highest score
     (the leftmost on ties) and replace the pair by it; repeat until no pair merges.
  5. EOS (id 2) last when asked.
Decoding one id after another: the piece, except that after BOS a leading space is dropped, and a piece
"<0xNN>" stands for the raw byte NN. BOS and EOS themselves produce no text.

Run `python3 tests/python/tokenizer_reference.py` to rewrite the reference files.
"""
import json
import pathlib
import struct
import sys

BOS, EOS = 1, 2
ROOT = pathlib.Path(__file__).resolve().parents[2]

# Texts chosen to exercise every rule: quotes, punctuation, digits, runs of spaces, tabs and newlines,
# non-ASCII (accents, CJK, emoji: byte fallback in a 512-piece vocabulary), and the empty string.
TEXTS = [
    "Once upon a time",
    "Once upon a time, there was a little girl named Lily.",
    "\"Can I play?\" asked Tom. 'Yes!' said Mom; \"but come home by 5:30.\"",
    "She counted 1, 2, 3... 10, 42, 2024 and 3.14159!",
    "The  dog   ran    fast.     Then  it  stopped.",
    "  leading and trailing spaces  ",
    "Line one.\nLine two.\n\nTab\there.",
    "Zoë ate crème brûlée at the café in Zürich.",
    "日本語のテキスト and 中文",
    "A smile 😊 and a star ⭐!",
    "über-naïve façade — “quoted” ‘text’ … end",
    "<s> is not BOS, and <0x41> is not A",
    "a",
    " ",
    "",
    "!!!???;;;:::",
    "Tim and Sue went to the park. They saw a big red ball. \"Let's play!\" said Sue.",
]


def load(path):
    raw = pathlib.Path(path).read_bytes()
    (max_len,) = struct.unpack_from("<i", raw, 0)
    offset, pieces, scores = 4, [], []
    while offset < len(raw):
        score, length = struct.unpack_from("<fi", raw, offset)
        offset += 8
        pieces.append(raw[offset:offset + length])
        scores.append(score)
        offset += length
    return max_len, pieces, scores


class Reference:
    def __init__(self, path):
        self.max_len, self.pieces, self.scores = load(path)
        self.index = {}
        for i, p in enumerate(self.pieces):
            self.index.setdefault(p, i)

    def _groups(self, data):
        groups, cur = [], b""
        for b in data:
            if (b & 0xC0) != 0x80 or len(cur) >= 4 or not cur:
                if cur:
                    groups.append(cur)
                cur = bytes([b])
            else:
                cur += bytes([b])
        if cur:
            groups.append(cur)
        return groups

    def encode(self, text, bos=True, eos=False):
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        ids = [BOS] if bos else []
        if data:
            ids.append(self.index[b" "])
        for g in self._groups(data):
            if g in self.index:
                ids.append(self.index[g])
            else:
                ids.extend(self.index[b"<0x%02X>" % b] for b in g)
        while True:
            best, best_i = None, -1
            for i in range(len(ids) - 1):
                merged = self.pieces[ids[i]] + self.pieces[ids[i + 1]]
                j = self.index.get(merged)
                if j is not None and (best is None or self.scores[j] > self.scores[best]):
                    best, best_i = j, i
            if best is None:
                break
            ids[best_i:best_i + 2] = [best]
        if eos:
            ids.append(EOS)
        return ids

    def decode(self, ids):
        out, prev = b"", -1
        for t in ids:
            if t in (BOS, EOS):
                prev = t
                continue
            p = self.pieces[t]
            if prev == BOS and p.startswith(b" "):
                p = p[1:]
            if len(p) == 6 and p.startswith(b"<0x") and p.endswith(b">"):
                try:
                    p = bytes([int(p[3:5], 16)])
                except ValueError:
                    pass
            out += p
            prev = t
        return out


def write_reference(tokenizer_path, out_path, label):
    ref = Reference(tokenizer_path)
    cases = []
    for text in TEXTS:
        ids = ref.encode(text, bos=True)
        cases.append({"text": text, "bos": True, "ids": ids,
                      "decoded": ref.decode(ids).decode("utf-8", errors="replace")})
    cases.append({"text": TEXTS[1], "bos": False, "ids": ref.encode(TEXTS[1], bos=False),
                  "decoded": ref.decode(ref.encode(TEXTS[1], bos=False)).decode("utf-8")})
    doc = {
        "tokenizer": label,
        "made_by": "tests/python/tokenizer_reference.py (an independent Python encoder)",
        "vocab_size": len(ref.pieces),
        "cases": cases,
    }
    pathlib.Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    head = {k: v for k, v in doc.items() if k != "cases"}
    lines = [json.dumps(c, ensure_ascii=False) for c in cases]
    text = json.dumps(head, ensure_ascii=False, indent=1)[:-2] + ',\n "cases": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n"
    json.loads(text)
    pathlib.Path(out_path).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    out = ROOT / "tests" / "data" / "tokenizer"
    write_reference(ROOT / "models" / "stories260K" / "tok512.bin", out / "tok512.json", "models/stories260K/tok512.bin")
    if len(sys.argv) > 1:  # the 32000-piece tokenizer.bin, when given (it is not in the repository)
        write_reference(sys.argv[1], out / "tokenizer32000.json", "llama2.c tokenizer.bin (32000 pieces)")
