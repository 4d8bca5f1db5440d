// usage: node encode_file.mjs TOKENIZER_JSON TEXT_FILE
// Prints the token ids of the whole UTF-8 text file as one JSON array on stdout.
import fs from "node:fs";
import { loadTokenizer, encode } from "./reference_tokenizer.mjs";

const [tokPath, textPath] = process.argv.slice(2);
if (!textPath) {
  console.error("usage: node encode_file.mjs TOKENIZER_JSON TEXT_FILE");
  process.exit(2);
}
const tok = loadTokenizer(tokPath);
process.stdout.write(JSON.stringify(encode(tok, fs.readFileSync(textPath, "utf8"))) + "\n");
