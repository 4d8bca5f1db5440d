// usage: node hf_tokenize.mjs TOKENIZER_JSON TEXTS_JSON
// Encodes every string of the JSON array in TEXTS_JSON with Hugging Face tokenizers' own Rust
// library (the Node binding @anush008/tokenizers, tokenizers 0.22) loaded from TOKENIZER_JSON,
// and prints one JSON array of {"ids", "ids_special", "decoded", "decoded_skip"}: ids without
// special tokens, ids with them (the post-processor's), decode(ids) and
// decode(ids, skip_special_tokens). The reference for the Unigram model (Fuyu), which the
// JavaScript ports do not implement with byte fallback.
import fs from "node:fs";
import hf from "@anush008/tokenizers";

const [tokPath, textsPath] = process.argv.slice(2);
if (!textsPath) {
  console.error("usage: node hf_tokenize.mjs TOKENIZER_JSON TEXTS_JSON");
  process.exit(2);
}
const tok = await hf.Tokenizer.fromFile(tokPath);
const texts = JSON.parse(fs.readFileSync(textsPath, "utf8"));
const out = [];
for (const text of texts) {
  const plain = await tok.encode(text, null, { addSpecialTokens: false });
  const special = await tok.encode(text, null, { addSpecialTokens: true });
  const ids = Array.from(plain.getIds());
  out.push({
    ids,
    ids_special: Array.from(special.getIds()),
    decoded: await tok.decode(ids, false),
    decoded_skip: await tok.decode(ids, true),
  });
}
process.stdout.write(JSON.stringify(out) + "\n");
