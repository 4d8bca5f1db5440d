// usage: node golden_sentencepiece.mjs TOKENIZER_JSON VARIANT OUT_JSONL CORPUS_JSONL [MAX_LINES]
//                                      [CORPUS_JSONL [MAX_LINES]]...
// Golden file for mmrt's SentencePiece-style BPE (byte fallback) conformance test: for every
// line of the corpora (one JSON string per line), {"text", "ids", "decoded", "decoded_skip"}
// from @lenml/tokenizers: ids without special tokens added; decode(ids) when it differs from
// the text, decode(ids, skip_special_tokens) when it differs from that. VARIANT "legacy" uses the file as it is (Llama-2: Prepend + Replace
// normalizer, no pre-tokenizer); "metaspace" swaps those for the Metaspace pre-tokenizer of
// newer Llama/Mistral files (the same change tests/tokenizer/test_conformance.cpp makes).
import fs from "node:fs";
import path from "node:path";
import { TokenizerLoader } from "@lenml/tokenizers";

const [tokPath, variant, outPath, ...rest] = process.argv.slice(2);
if (!outPath || rest.length === 0 || !["legacy", "metaspace"].includes(variant)) {
  console.error("usage: node golden_sentencepiece.mjs TOKENIZER_JSON legacy|metaspace OUT_JSONL " +
                "CORPUS_JSONL [MAX_LINES] ...");
  process.exit(2);
}
const tokenizerJSON = JSON.parse(fs.readFileSync(tokPath, "utf8"));
const tokenizerConfig =
  JSON.parse(fs.readFileSync(path.join(path.dirname(tokPath), "tokenizer_config.json"), "utf8"));
if (variant === "metaspace") {
  tokenizerJSON.normalizer = null;
  tokenizerJSON.pre_tokenizer = { type: "Metaspace", replacement: "\u2581", add_prefix_space: true,
                                  prepend_scheme: "first", split: false };
}
const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
const out = [];
for (let i = 0; i < rest.length; ) {
  const corpus = rest[i++];
  let max = Infinity;
  if (i < rest.length && /^\d+$/.test(rest[i])) max = Number(rest[i++]);
  const lines = fs.readFileSync(corpus, "utf8").split("\n").filter((l) => l.length > 0);
  for (const l of lines.slice(0, max)) {
    const text = JSON.parse(l);
    const ids = tok.encode(text, { add_special_tokens: false });
    const row = { text, ids };
    const decoded = ids.length ? tok.decode(ids, { skip_special_tokens: false }) : "";
    const skipped = ids.length ? tok.decode(ids, { skip_special_tokens: true }) : "";
    if (decoded !== text) row.decoded = decoded;  // absent: equal to the text
    if (skipped !== decoded) row.decoded_skip = skipped;  // absent: equal to decoded
    out.push(JSON.stringify(row));
  }
}
fs.writeFileSync(outPath, out.join("\n") + "\n");
console.error(`${variant}: ${out.length} lines -> ${outPath}`);
