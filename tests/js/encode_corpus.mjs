// usage: node encode_corpus.mjs TOKENIZER_JSON CORPUS_JSONL OUT_JSONL
// Encodes every line of a JSONL corpus (one JSON string per line) and writes one JSON array of
// token ids per line: the golden file for mmrt's tokenizer conformance test.
import fs from "node:fs";
import { loadTokenizer, encode } from "./reference_tokenizer.mjs";

const [tokPath, corpusPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node encode_corpus.mjs TOKENIZER_JSON CORPUS_JSONL OUT_JSONL");
  process.exit(2);
}
const tok = loadTokenizer(tokPath);
const lines = fs.readFileSync(corpusPath, "utf8").split("\n").filter((l) => l.length > 0);
const out = lines.map((l) => JSON.stringify(encode(tok, JSON.parse(l))));
fs.writeFileSync(outPath, out.join("\n") + "\n");
console.error(`encoded ${lines.length} lines -> ${outPath}`);
