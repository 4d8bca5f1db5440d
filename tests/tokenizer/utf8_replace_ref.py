#!/usr/bin/env python3
"""Reference for UTF-8 decoding with replacement (Python's bytes.decode errors="replace").

usage: utf8_replace_ref.py IN.txt OUT.json
IN.txt holds one hex-encoded byte string per line; OUT.json gets a JSON array with the decoded
text of each line (U+FFFD for every maximal ill-formed subpart).
"""
import json
import sys

src, dst = sys.argv[1], sys.argv[2]
out = []
with open(src) as f:
    for line in f:
        out.append(bytes.fromhex(line.strip()).decode("utf-8", errors="replace"))
with open(dst, "w") as f:
    json.dump(out, f, ensure_ascii=True)
