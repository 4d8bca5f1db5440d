// make-tiny-model's shared machinery: tokenizer, Qwen2 tokenizer/generation configs, random
// weights.
#include "models/tiny_common.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <unordered_set>
#include <vector>

#include "core/convert.h"
#include "core/error.h"
#include "io/bpe_trainer.h"
#include "io/json_fields.h"
#include "io/safetensors.h"

namespace mmrt::models::tiny {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

// Element i of a tensor keyed by `key`: a counter-based hash, so any range can be produced
// independently. Sum of the four 16-bit fields (Irwin-Hall, n = 4) standardised to mean 0, var 1.
inline float approx_normal(uint64_t key, uint64_t i) {
  static const float kInvStd = static_cast<float>(1.0 / std::sqrt((65536.0 * 65536.0 - 1) / 3));
  uint64_t x = splitmix64(key ^ (i * 0xD1B54A32D192ED03ull));
  uint32_t s =
      static_cast<uint32_t>((x & 0xFFFF) + ((x >> 16) & 0xFFFF) + ((x >> 32) & 0xFFFF) + (x >> 48));
  return (static_cast<float>(s) - 131070.0f) * kInvStd;
}

enum class Init { kNormal, kOnes, kZeros };

// Fills elements [b, e) of a tensor with its initial values in `dtype`.
void fill_values(void* dst, int64_t b, int64_t e, DType dtype, Init init, uint64_t key, float std) {
  constexpr int64_t kBuf = 4096;
  float tmp[kBuf];
  for (int64_t i = b; i < e; i += kBuf) {
    const int64_t n = std::min(kBuf, e - i);
    float* out = dtype == DType::kF32 ? static_cast<float*>(dst) + (i - b) : tmp;
    if (init == Init::kNormal) {
      for (int64_t k = 0; k < n; ++k)
        out[k] = std * approx_normal(key, static_cast<uint64_t>(i + k));
    } else {
      std::fill(out, out + n, init == Init::kOnes ? 1.0f : 0.0f);
    }
    if (dtype == DType::kBF16)
      f32_to_bf16(tmp, static_cast<uint16_t*>(dst) + (i - b), static_cast<size_t>(n));
  }
}

TokenizerFacts read_tokenizer_facts(const std::string& text, const std::string& origin) {
  const json j = io::parse_json(text, origin);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object() ||
      !j["model"].contains("vocab") ||
      !(j["model"]["vocab"].is_object() || j["model"]["vocab"].is_array()))
    throw FormatError(origin + ": no model.vocab object (BPE) or array (Unigram)");
  TokenizerFacts f;
  int64_t max_id = -1;
  if (j["model"]["vocab"].is_array()) {  // Unigram: [["piece", score], ...], id = index
    max_id = static_cast<int64_t>(j["model"]["vocab"].size()) - 1;
  } else {
    for (const auto& [piece, id] : j["model"]["vocab"].items()) {
      if (!id.is_number_integer())
        throw FormatError(origin + ": vocab id of '" + piece + "' is not an integer");
      max_id = std::max<int64_t>(max_id, id.get<int64_t>());
    }
  }
  f.added_tokens = j.value("added_tokens", json::array());
  if (!f.added_tokens.is_array()) throw FormatError(origin + ": \"added_tokens\" is not an array");
  for (const auto& t : f.added_tokens) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        !t.contains("content") || !t["content"].is_string())
      throw FormatError(origin + ": an added_tokens entry lacks an integer id or string content");
    int64_t id = t["id"].get<int64_t>();
    f.added_ids[t["content"].get<std::string>()] = id;
    max_id = std::max(max_id, id);
  }
  f.size = static_cast<int32_t>(max_id + 1);
  return f;
}

// Whether a tokenizer.json is byte-level: its pre-tokenizer is ByteLevel or a Sequence with a
// ByteLevel step (the tokenizer loader's test; anything else is SentencePiece-style).
bool is_byte_level(const nlohmann::ordered_json& j) {
  const auto type_is = [](const nlohmann::ordered_json& p, const char* t) {
    return p.is_object() && p.contains("type") && p["type"] == t;
  };
  if (!j.contains("pre_tokenizer")) return false;
  const auto& pre = j["pre_tokenizer"];
  if (type_is(pre, "ByteLevel")) return true;
  if (type_is(pre, "Sequence") && pre.contains("pretokenizers") && pre["pretokenizers"].is_array())
    for (const auto& p : pre["pretokenizers"])
      if (type_is(p, "ByteLevel")) return true;
  return false;
}

}  // namespace

fs::path create_output_dir(const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (!fs::is_directory(out_dir))
    throw FailedPrecondition(out_dir + ": cannot create directory: " + ec.message());
  return fs::path(out_dir);
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) throw FailedPrecondition(path.string() + ": cannot write");
}

void check_dtype(DType dtype) {
  if (dtype != DType::kBF16 && dtype != DType::kF32)
    throw InvalidArgument("make-tiny-model: dtype must be bf16 or f32, got " +
                          std::string(dtype_name(dtype)));
}

Tokenizer make_tokenizer(const TokenizerOptions& o) {
  Tokenizer t;
  if (!o.path.empty()) {
    t.text = io::read_text_file(o.path);
    t.origin = o.path;
  } else if (o.style == TokenizerOptions::Style::kSentencePiece) {
    io::SentencePieceTrainOptions so;
    so.vocab_size = o.vocab_size;
    so.special_tokens = o.specials;
    so.special_first_id = o.special_first_id;
    t.text = io::train_sentencepiece_bpe(io::builtin_training_corpus(), so);
    t.origin = "trained tokenizer";
  } else if (o.style == TokenizerOptions::Style::kUnigram) {
    io::SentencePieceUnigramOptions uo;
    uo.vocab_size = o.vocab_size;
    uo.user_pieces = o.specials;
    uo.added_specials = o.unigram_added;
    uo.prefix_token = o.unigram_prefix;
    t.text = io::train_sentencepiece_unigram(io::builtin_training_corpus(), uo);
    t.origin = "trained tokenizer";
  } else {
    io::BpeTrainOptions bo;
    bo.vocab_size = o.vocab_size;
    bo.special_tokens = o.specials;
    bo.special_first_id = o.special_first_id;
    t.text = io::train_byte_level_bpe(io::builtin_training_corpus(), bo);
    t.origin = "trained tokenizer";
  }
  t.facts = read_tokenizer_facts(t.text, t.origin);
  return t;
}

void fill_unassigned_ids(Tokenizer& tok, int32_t n_ids) {
  using ordered = nlohmann::ordered_json;
  io::check_json_depth(tok.text, tok.origin);
  // Ordered: the file keeps HF's layout (vocabulary in id order, fillers after it). Fillers are
  // appended to the underlying vector (ordered_json's own insert searches linearly).
  ordered j = ordered::parse(tok.text);
  if (j["model"]["vocab"].is_array()) {
    // Unigram: ids are indices, so fillers go at the end, scored the lowest score already there
    // (the unknown-character penalty, which derives from it, stays). Their " x<id>" holds a plain
    // space, which the normaliser never leaves in text: no input encodes to them.
    auto& arr = j["model"]["vocab"];
    double lowest = 0;
    for (const auto& e : arr) lowest = std::min(lowest, e[1].get<double>());
    for (auto id = static_cast<int32_t>(arr.size()); id < n_ids; ++id)
      arr.push_back({" x" + std::to_string(id), lowest});
    tok.text = j.dump(2) + "\n";
    tok.facts = read_tokenizer_facts(tok.text, tok.origin);
    return;
  }
  auto& vocab = j["model"]["vocab"].get_ref<ordered::object_t&>();
  std::vector<bool> used(static_cast<size_t>(std::max(n_ids, tok.facts.size)), false);
  std::unordered_set<std::string> pieces;
  for (const auto& [piece, id] : vocab) {
    used[id.get<size_t>()] = true;
    pieces.insert(piece);
  }
  for (const auto& [content, id] : tok.facts.added_ids) used[static_cast<size_t>(id)] = true;
  // "Ġ" is the byte-level space, "▁" SentencePiece's.
  const std::string space = is_byte_level(j) ? "\xC4\xA0" : "\xE2\x96\x81";
  for (int32_t id = 0; id < n_ids; ++id) {
    if (used[static_cast<size_t>(id)]) continue;
    std::string piece = space + "x" + std::to_string(id);
    while (pieces.count(piece)) piece += "_";
    pieces.insert(piece);
    vocab.push_back({piece, ordered(id)});
  }
  tok.text = j.dump(2) + "\n";
  tok.facts = read_tokenizer_facts(tok.text, tok.origin);
}

int64_t special_id(const Tokenizer& tok, const std::string& token, const std::string& family) {
  auto it = tok.facts.added_ids.find(token);
  if (it == tok.facts.added_ids.end())
    throw InvalidArgument(tok.origin + ": the tokenizer has no " + token + " added token, which " +
                          family + " needs");
  return it->second;
}

std::string tokenizer_config_json(const TokenizerFacts& f, const std::vector<std::string>& specials,
                                  const std::string& chat_template, int64_t model_max_length) {
  json additional = json::array();
  for (const auto& s : specials)
    if (s != "<|endoftext|>" && f.added_ids.count(s)) additional.push_back(s);
  json j;
  j["add_prefix_space"] = false;
  j["added_tokens_decoder"] = added_tokens_decoder<json>(f);
  j["additional_special_tokens"] = additional;
  j["bos_token"] = nullptr;
  j["chat_template"] = chat_template;
  j["clean_up_tokenization_spaces"] = false;
  j["eos_token"] = "<|im_end|>";
  j["errors"] = "replace";
  j["model_max_length"] = model_max_length;
  j["pad_token"] = "<|endoftext|>";
  j["split_special_tokens"] = false;
  j["tokenizer_class"] = "Qwen2Tokenizer";
  j["unk_token"] = nullptr;
  return j.dump(2) + "\n";
}

std::string generation_config_json(int64_t bos, int64_t eos, int64_t endoftext) {
  json j;
  j["bos_token_id"] = bos;
  j["eos_token_id"] = {eos, endoftext};
  j["pad_token_id"] = endoftext;
  j["transformers_version"] = "4.45.0.dev0";
  return j.dump(2) + "\n";
}

int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

WrittenWeights write_random_weights(const std::string& out_dir,
                                    const std::vector<TensorSpec>& tensors,
                                    const WeightOptions& o) {
  check_dtype(o.dtype);
  const uint64_t base_key = splitmix64(o.seed ^ 0x6D6D72742D746E79ull);
  WrittenWeights w;
  std::vector<io::PendingTensor> pending;
  for (const TensorSpec& t : tensors) {
    Init init = Init::kNormal;
    if (t.norm) {
      const std::string& n = t.canonical;
      const bool is_bias = n.size() > 5 && n.compare(n.size() - 5, 5, ".bias") == 0;
      init = is_bias ? Init::kZeros : Init::kOnes;
    }
    const uint64_t key = splitmix64(base_key ^ fnv1a(t.canonical));
    const DType dt = o.dtype;
    pending.push_back({t.stored, dt, t.shape, [dt, init, key](void* dst, int64_t b, int64_t en) {
                         fill_values(dst, b, en, dt, init, key, 0.02f);
                       }});
    w.n_params += shape_numel(t.shape);
  }
  w.n_tensors = pending.size();
  std::function<void(uint64_t, uint64_t)> progress;
  if (o.progress) {
    progress = [](uint64_t done, uint64_t total) {
      std::fprintf(stderr, "\r[make-tiny-model] weights %8.1f / %.1f MB (%3.0f%%)", done / 1e6,
                   total / 1e6, total ? 100.0 * done / total : 100.0);
      if (done == total) std::fprintf(stderr, "\n");
      std::fflush(stderr);
    };
  }
  w.files = io::write_checkpoint_streamed(out_dir, pending, o.max_shard_bytes, {{"format", "pt"}},
                                          o.pool, progress);
  w.n_bytes = static_cast<uint64_t>(w.n_params) * dtype_size(o.dtype);
  return w;
}

TinyModelResult report(std::vector<std::string> files, const WrittenWeights& weights,
                       int32_t tokenizer_size, int64_t vocab_size, double seconds_from) {
  TinyModelResult r;
  r.files = std::move(files);
  r.files.insert(r.files.end(), weights.files.begin(), weights.files.end());
  r.n_tensors = weights.n_tensors;
  r.n_params = weights.n_params;
  r.n_bytes = weights.n_bytes;
  r.tokenizer_size = tokenizer_size;
  r.vocab_size = vocab_size;
  r.seconds = clock_seconds() - seconds_from;
  return r;
}

double clock_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace mmrt::models::tiny
