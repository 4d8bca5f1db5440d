// Byte-level BPE training (most frequent pair first, like Hugging Face's BpeTrainer) and the
// Qwen2-format tokenizer.json writer; the merge loop that the SentencePiece-style trainer
// (sp_trainer.cpp) shares.
#include "io/bpe_trainer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "io/bpe_merge.h"
#include "io/unicode.h"

namespace mmrt::io {

namespace {

using ojson = nlohmann::ordered_json;

uint64_t pack(int32_t a, int32_t b) {
  return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
}

struct Candidate {
  int64_t count;
  int32_t a, b;
  // Max-heap order: higher count first, then the smaller pair (earlier tokens) first.
  bool operator<(const Candidate& o) const {
    if (count != o.count) return count < o.count;
    if (a != o.a) return a > o.a;
    return b > o.b;
  }
};

void check_options(const BpeTrainOptions& opts) {
  if (opts.vocab_size < 256)
    throw InvalidArgument("BPE trainer: vocab_size " + std::to_string(opts.vocab_size) +
                          " is below the 256 byte tokens");
  if (opts.special_first_id != -1 && opts.special_first_id < opts.vocab_size)
    throw InvalidArgument("BPE trainer: special_first_id " + std::to_string(opts.special_first_id) +
                          " must be -1 or >= vocab_size " + std::to_string(opts.vocab_size));
  const int64_t first = opts.special_first_id >= 0 ? opts.special_first_id : opts.vocab_size;
  if (first + static_cast<int64_t>(opts.special_tokens.size()) > INT32_MAX)
    throw InvalidArgument("BPE trainer: special token ids overflow int32");
  std::unordered_set<std::string> seen;
  for (const auto& s : opts.special_tokens) {
    if (s.empty()) throw InvalidArgument("BPE trainer: empty special token");
    if (!unicode::is_valid_utf8(s))
      throw InvalidArgument("BPE trainer: special token is not valid UTF-8");
    if (!seen.insert(s).second) throw InvalidArgument("BPE trainer: duplicate special token " + s);
  }
}

}  // namespace

std::vector<std::pair<int32_t, int32_t>> detail::learn_bpe_merges(
    std::vector<BpeWord>& words, std::vector<std::string>& tok_bytes, int32_t vocab_size,
    const std::function<bool(const std::string&)>& allowed) {
  std::unordered_map<std::string, int32_t> id_of_bytes;
  for (size_t id = 0; id < tok_bytes.size(); ++id) id_of_bytes.emplace(tok_bytes[id], int32_t(id));

  // Pair statistics: count (weighted by word frequency) and the words that may contain it.
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> pair_words;
  for (size_t w = 0; w < words.size(); ++w) {
    const auto& s = words[w].sym;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const uint64_t p = pack(s[i], s[i + 1]);
      pair_count[p] += words[w].freq;
      auto& v = pair_words[p];
      if (v.empty() || v.back() != int32_t(w)) v.push_back(int32_t(w));
    }
  }
  std::priority_queue<Candidate> heap;
  for (const auto& [p, c] : pair_count) heap.push({c, int32_t(p >> 32), int32_t(uint32_t(p))});

  std::vector<std::pair<int32_t, int32_t>> merges;
  std::vector<uint32_t> stamp(words.size(), 0);  // [n_words] dedupes pair_words per merge
  uint32_t round = 0;
  while (int32_t(tok_bytes.size()) < vocab_size && !heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    const uint64_t p = pack(top.a, top.b);
    auto cit = pair_count.find(p);
    const int64_t current = cit == pair_count.end() ? 0 : cit->second;
    if (current != top.count) {  // stale entry: requeue with the live count
      if (current > 0) heap.push({current, top.a, top.b});
      continue;
    }
    if (current <= 0) continue;

    const std::string merged = tok_bytes[top.a] + tok_bytes[top.b];
    if (allowed && !allowed(merged)) continue;  // dropped; pushed again only if its count grows
    int32_t c;
    if (auto it = id_of_bytes.find(merged); it != id_of_bytes.end()) {
      c = it->second;  // the same bytes were already learned through another pair
    } else {
      c = int32_t(tok_bytes.size());
      tok_bytes.push_back(merged);
      id_of_bytes.emplace(merged, c);
    }
    merges.emplace_back(top.a, top.b);

    ++round;
    std::vector<int32_t> affected = std::move(pair_words[p]);
    pair_words.erase(p);
    std::unordered_map<uint64_t, int64_t> grown;  // pairs with c whose count went up
    for (int32_t w : affected) {
      if (stamp[w] == round) continue;
      stamp[w] = round;
      BpeWord& word = words[w];
      auto& s = word.sym;
      bool has = false;
      for (size_t i = 0; i + 1 < s.size() && !has; ++i) has = s[i] == top.a && s[i + 1] == top.b;
      if (!has) continue;
      for (size_t i = 0; i + 1 < s.size(); ++i) pair_count[pack(s[i], s[i + 1])] -= word.freq;
      std::vector<int32_t> out;
      out.reserve(s.size());
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == top.a && s[i + 1] == top.b) {
          out.push_back(c);
          ++i;
        } else {
          out.push_back(s[i]);
        }
      }
      s.swap(out);
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const uint64_t q = pack(s[i], s[i + 1]);
        pair_count[q] += word.freq;
        if (s[i] == c || s[i + 1] == c) {
          grown[q] = pair_count[q];
          auto& v = pair_words[q];
          if (v.empty() || v.back() != w) v.push_back(w);
        }
      }
    }
    pair_count.erase(p);
    for (const auto& [q, n] : grown)
      if (pair_count[q] > 0) heap.push({pair_count[q], int32_t(q >> 32), int32_t(uint32_t(q))});
  }

  return merges;
}

std::string train_byte_level_bpe(const std::string& corpus, const BpeTrainOptions& opts) {
  check_options(opts);

  // Byte tokens get ids 0..255 in the order of their alphabet characters (as in GPT-2 / Qwen2).
  const auto& alphabet = unicode::byte_to_codepoint();
  std::vector<int> byte_of_id(256);  // [256]
  for (int b = 0; b < 256; ++b) byte_of_id[b] = b;
  std::sort(byte_of_id.begin(), byte_of_id.end(),
            [&](int x, int y) { return alphabet[x] < alphabet[y]; });
  std::array<int32_t, 256> id_of_byte{};
  for (int id = 0; id < 256; ++id) id_of_byte[byte_of_id[id]] = id;

  std::vector<std::string> tok_bytes(256);  // [n_tokens] raw bytes of each token
  for (int id = 0; id < 256; ++id) tok_bytes[id] = std::string(1, char(byte_of_id[id]));

  // Pre-tokenize exactly as the Qwen2 tokenizer will (NFC, then the split regex).
  const std::string text = unicode::nfc(unicode::sanitize_utf8(corpus));
  const unicode::SplitRegex split(unicode::kQwen2SplitPattern, "BPE trainer");
  std::unordered_map<std::string, int64_t> counts_by_word;
  split.split(text, [&](size_t b, size_t e) { ++counts_by_word[text.substr(b, e - b)]; });
  std::vector<std::pair<std::string, int64_t>> sorted(counts_by_word.begin(), counts_by_word.end());
  std::sort(sorted.begin(), sorted.end());  // deterministic order
  std::vector<detail::BpeWord> words;       // [n_words]
  words.reserve(sorted.size());
  for (const auto& [w, f] : sorted) {
    detail::BpeWord word;
    word.freq = f;
    for (char c : w) word.sym.push_back(id_of_byte[static_cast<unsigned char>(c)]);
    words.push_back(std::move(word));
  }

  const std::vector<std::pair<int32_t, int32_t>> merges =
      detail::learn_bpe_merges(words, tok_bytes, opts.vocab_size, {});

  // ---- tokenizer.json in the Qwen2 layout ----
  const int32_t first_special =
      opts.special_first_id >= 0 ? opts.special_first_id : opts.vocab_size;
  ojson added = ojson::array();
  for (size_t k = 0; k < opts.special_tokens.size(); ++k) {
    ojson t;
    t["id"] = first_special + int32_t(k);
    t["content"] = opts.special_tokens[k];
    t["single_word"] = false;
    t["lstrip"] = false;
    t["rstrip"] = false;
    t["normalized"] = false;
    t["special"] = true;
    added.push_back(std::move(t));
  }
  ojson byte_level;
  byte_level["type"] = "ByteLevel";
  byte_level["add_prefix_space"] = false;
  byte_level["trim_offsets"] = false;
  byte_level["use_regex"] = false;

  ojson split_step;
  split_step["type"] = "Split";
  split_step["pattern"] = {{"Regex", std::string(unicode::kQwen2SplitPattern)}};
  split_step["behavior"] = "Isolated";
  split_step["invert"] = false;

  ojson vocab = ojson::object();
  std::vector<std::string> piece(tok_bytes.size());  // [n_tokens] byte-level strings
  for (size_t id = 0; id < tok_bytes.size(); ++id) {
    piece[id] = unicode::bytes_to_byte_level(tok_bytes[id]);
    vocab[piece[id]] = int32_t(id);
  }
  ojson merge_list = ojson::array();
  for (const auto& [a, b] : merges) merge_list.push_back(piece[a] + " " + piece[b]);

  ojson model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = nullptr;
  model["continuing_subword_prefix"] = "";
  model["end_of_word_suffix"] = "";
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["ignore_merges"] = false;
  model["vocab"] = std::move(vocab);
  model["merges"] = std::move(merge_list);

  ojson root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  root["added_tokens"] = std::move(added);
  root["normalizer"] = {{"type", "NFC"}};
  root["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split_step, byte_level}}};
  root["post_processor"] = byte_level;
  root["decoder"] = byte_level;
  root["model"] = std::move(model);
  return root.dump(2) + "\n";
}

}  // namespace mmrt::io

namespace mmrt::io {

const std::string& builtin_training_corpus() {
  static const std::string text =
      R"CORPUS(The quick brown fox jumps over the lazy dog. A latency-first inference server answers
within its deadline or refuses the request up front; it is never silently late. Requests
arrive with text, images, audio and video, and each one carries a service class such as
"platinum: first token within 300 ms" or "bronze: best effort".

Once upon a time, in a small town by the sea, there lived an old clockmaker who repaired
watches for the fishermen. Every morning he opened his shop at seven o'clock, brewed a pot
of black tea, and listened to the gulls. "Time," he liked to say, "is the only thing we
can't borrow, so don't waste it." The children would laugh, but they'd always come back.
She said: 'It's fine, we're almost there.' He replied: "I'll believe it when I've seen it!"
They've got three cats, two dogs and a parrot named Captain; the parrot's favourite word
is "breakfast". Isn't it strange how quickly the years go by? Well... maybe not.

Weather report for Tuesday, 14 March 2024: sunny intervals, highs of 17°C (63°F), a light
breeze from the south-west at 12 km/h, humidity 45%, UV index 4, sunset at 18:42.
Prices: coffee $3.50, croissant €2.20, train ticket £14.75, ramen ¥980, total = 27.45.
Call +1 (555) 010-2368 or write to support@example.com before 2024-12-31T23:59:59Z.

def fibonacci(n: int) -> list[int]:
    """Return the first n Fibonacci numbers."""
    seq = [0, 1]
    while len(seq) < n:
        seq.append(seq[-1] + seq[-2])
    return seq[:n]

if __name__ == "__main__":
    for i, x in enumerate(fibonacci(10)):
        print(f"{i:>2}: {x}")

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  std::vector<float> data(1024, 0.5f);
  float sum = 0.0f;
  for (size_t i = 0; i < data.size(); ++i) {
    sum += data[i] * data[i];
  }
  std::printf("sum = %.3f\n", sum);
  return argc > 1 ? 1 : 0;
}

{"model": "qwen2-vl", "messages": [{"role": "user", "content": "Describe the image."}],
 "max_tokens": 128, "temperature": 0.7, "stream": true, "stop": ["</s>", "\n\n"]}

SELECT name, COUNT(*) AS n FROM requests WHERE latency_ms > 300 GROUP BY name ORDER BY n DESC;
$ curl -s http://localhost:8080/v1/models | jq '.data[].id'
git commit -m "Fix off-by-one in the scheduler's token budget"

	Tabs	separate	these	columns
	1	2	3	4
	5	6	7	8
Line with trailing spaces   
)CORPUS"
      "Windows line endings\r\nand a bare carriage return\rhere.\r\n"
      R"CORPUS(    Indented by four spaces, then eight:
        deeper still.

0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 25 50 75 100 128 256 512 1024 2048
3.14159265358979 2.71828182845904 1.41421356237309 0.5772156649 6.02214076e23 -273.15
1,000,000 1.5k 2M 3rd 21st 42nd 1/2 3/4 99% 0x7fff 0b1010 1e-6 +inf NaN

人工智能正在改变我们的生活方式。今天的天气很好，我们一起去公园散步吧。这个模型可以同时理解图片、
视频和文字，并且在三百毫秒之内给出第一个回答。北京是中国的首都，上海是最大的城市。学习中文需要
时间和耐心，但是非常有意思。我喜欢喝茶，也喜欢看书。请问，去火车站怎么走？谢谢你的帮助！

東京は日本の首都です。今日はとても暑いですね。私は毎朝コーヒーを飲みながらニュースを読みます。
この推論サーバーは画像と動画を理解できます。ひらがな、カタカナ、そして漢字を使います。ありがとう
ございました。またお会いしましょう。

안녕하세요! 오늘 날씨가 정말 좋네요. 저는 서울에 살고 있습니다. 한국어는 배우기 재미있는
언어입니다. 이 서버는 지연 시간을 최우선으로 생각합니다. 감사합니다.

مرحبا بكم في عالم الذكاء الاصطناعي. اللغة العربية جميلة وغنية. الطقس اليوم مشمس ودافئ.
شكرا جزيلا على مساعدتك. الأرقام: ٠ ١ ٢ ٣ ٤ ٥ ٦ ٧ ٨ ٩.

Привет, мир! Сегодня хорошая погода. Я люблю читать книги и пить чай по вечерам.
Grüße aus München! Die Straße ist nass, weil es geregnet hat. Schöne Grüße, Jürgen.
Bonjour à tous ! L'été dernier, nous sommes allés à la mer. C'était très agréable.
¡Hola! ¿Cómo estás? El niño comió una manzana y después jugó al fútbol con sus amigos.
Tiếng Việt có nhiều dấu thanh: người, được, những, phở bò, Hà Nội, cảm ơn bạn.
नमस्ते दुनिया! हिन्दी भाषा भारत में बोली जाती है। आपका दिन शुभ हो।
Ελληνικά: Καλημέρα κόσμε! Το αλφάβητο έχει εικοσιτέσσερα γράμματα.
עברית: שלום עולם! היום יום יפה.
ไทย: สวัสดีครับ วันนี้อากาศดีมาก

Emoji: 😀 😂 🥲 🤖 🚀 🔥 ✨ ❤️ 👍 👍🏽 👋🏿 🎉 🙈 🍣 🐍 🦀 🌍 ☕ ⚡ ✅ ❌ 📷 🎥 🧠 💡
Families and flags: 👨‍👩‍👧‍👦 👩‍💻 🧑‍🚀 🏳️‍🌈 🇺🇸 🇨🇳 🇯🇵 🇰🇷 🇩🇪 🇫🇷 1️⃣ #️⃣
Symbols: © ® ™ § ¶ † ‡ • … ‰ ′ ″ ← → ↑ ↓ ⇒ ∀ ∃ ∈ ∑ √ ∞ ≈ ≠ ≤ ≥ ± × ÷ ° µ Ω π λ
Quotes and dashes: “double” ‘single’ «guillemets» — em dash – en dash ‐ hyphen
Fullwidth: ＡＢＣ１２３！？ and ideographic space:　end.
)CORPUS";
  return text;
}

}  // namespace mmrt::io
