// usage: node encode_trained.mjs TOKENIZER_JSON TEXTS_JSON
// Encodes every string of the JSON array in TEXTS_JSON with @lenml/tokenizers loaded from a
// SentencePiece-style tokenizer.json (as mmrt's trainer writes it) and prints one JSON array of
// {"ids", "ids_bos", "decoded", "decoded_skip"}: ids without special tokens, ids with them (the
// post-processor's <s>), decode(ids) and decode(ids, skip_special_tokens).
// The file is used as it is (LlamaTokenizer with legacy: true keeps its normaliser and
// pre-tokenizer). A Metaspace pre-tokenizer written without add_prefix_space (the form of
// tokenizers >= 0.19, where prepend_scheme alone decides) gets add_prefix_space: true, which is
// what this library needs to honour prepend_scheme.
import fs from "node:fs";
import { TokenizerLoader } from "@lenml/tokenizers";

const [tokPath, textsPath] = process.argv.slice(2);
if (!textsPath) {
  console.error("usage: node encode_trained.mjs TOKENIZER_JSON TEXTS_JSON");
  process.exit(2);
}
const tokenizerJSON = JSON.parse(fs.readFileSync(tokPath, "utf8"));
const pre = tokenizerJSON.pre_tokenizer;
if (pre && pre.type === "Metaspace" && pre.add_prefix_space === undefined) {
  pre.add_prefix_space = true;
}
const tokenizerConfig = {
  tokenizer_class: "LlamaTokenizer",
  legacy: true,
  add_bos_token: true,
  add_eos_token: false,
  bos_token: "<s>",
  eos_token: "</s>",
  unk_token: "<unk>",
  clean_up_tokenization_spaces: false,
};
const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
const texts = JSON.parse(fs.readFileSync(textsPath, "utf8"));
const out = texts.map((text) => {
  const ids = tok.encode(text, { add_special_tokens: false });
  const ids_bos = tok.encode(text, { add_special_tokens: true });
  const decoded = ids.length ? tok.decode(ids, { skip_special_tokens: false }) : "";
  const decoded_skip = ids.length ? tok.decode(ids, { skip_special_tokens: true }) : "";
  return { ids, ids_bos, decoded, decoded_skip };
});
process.stdout.write(JSON.stringify(out) + "\n");
