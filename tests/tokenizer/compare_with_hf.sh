#!/usr/bin/env bash
# Compares mmrt's tokenizer with Hugging Face tokenizers' own Rust library (tests/js/hf_tokenize.mjs)
# on any tokenizer.json, e.g. a real checkpoint's that cannot be committed:
#   tests/tokenizer/compare_with_hf.sh PATH/tokenizer.json [TEXTS.jsonl]
# TEXTS.jsonl holds one JSON string a line (default: the conformance corpus and the hand-written
# SentencePiece cases). Prints how many texts give identical ids and decoded text, and the first
# differences; exits 1 on any. Needs a release build (make build) and scripts/setup.sh's npm packages.
set -euo pipefail
cd "$(dirname "$0")/../.."
TOK=${1:?usage: compare_with_hf.sh TOKENIZER_JSON [TEXTS.jsonl]}
TEXTS=${2:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [[ -z $TEXTS ]]; then
  cat tests/tokenizer/data/corpus.jsonl tests/tokenizer/data/corpus_sentencepiece.jsonl >"$work/texts.jsonl"
else
  cp "$TEXTS" "$work/texts.jsonl"
fi
/usr/bin/python3 -c 'import json,sys; print(json.dumps([json.loads(l) for l in open(sys.argv[1]) if l.strip()]))' \
  "$work/texts.jsonl" >"$work/texts.json"
build/release/tools/mmrt tokenize --model "$TOK" --jsonl <"$work/texts.jsonl" >"$work/ours.jsonl"
node tests/js/hf_tokenize.mjs "$TOK" "$work/texts.json" >"$work/hf.json"
build/release/tools/mmrt detokenize --model "$TOK" --jsonl <"$work/ours.jsonl" >"$work/ours_text.jsonl"
/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
texts = json.load(open(f"{work}/texts.json"))
ours = [json.loads(l) for l in open(f"{work}/ours.jsonl")]
hf = json.load(open(f"{work}/hf.json"))
decoded = [json.loads(l) for l in open(f"{work}/ours_text.jsonl")]
assert len(ours) == len(texts) == len(hf), (len(ours), len(texts), len(hf))
bad = [i for i in range(len(texts)) if ours[i] != hf[i]["ids"]]
dec_bad = [i for i in range(len(texts)) if i not in bad and decoded[i] != hf[i]["decoded"]]
print(f"{len(texts) - len(bad)} of {len(texts)} texts: identical ids "
      f"({sum(len(x) for x in ours)} ids); {len(texts) - len(bad) - len(dec_bad)} of them decode "
      f"to the same text")
for i in bad[:5]:
    print(f"text #{i}: {texts[i][:120]!r}\n  mmrt {ours[i][:40]}\n  hf   {hf[i]['ids'][:40]}")
for i in dec_bad[:5]:
    print(f"decode #{i}: {texts[i][:120]!r}\n  mmrt {decoded[i][:120]!r}\n  hf   {hf[i]['decoded'][:120]!r}")
sys.exit(1 if bad or dec_bad else 0)
PY
