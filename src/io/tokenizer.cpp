// Byte-level BPE encode/decode and the streaming detokenizer (loading: tokenizer_load.cpp).
#include "io/tokenizer.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "core/error.h"
#include "io/file.h"
#include "io/tokenizer_internal.h"

namespace mmrt::io {

namespace detail {

// ---- PairMap -----------------------------------------------------------------------------------

void PairMap::reserve(size_t n) {
  size_t cap = 16;
  while (cap * 5 < n * 8) cap <<= 1;  // load factor <= 0.625
  if (cap <= slots_.size()) return;
  std::vector<uint64_t> old = std::move(slots_);
  slots_.assign(cap, kEmpty);
  mask_ = cap - 1;
  shift_ = 64 - std::countr_zero(cap);
  for (uint64_t e : old) {
    if (e == kEmpty) continue;
    size_t i = slot(e >> 21);
    while (slots_[i] != kEmpty) i = (i + 1) & mask_;
    slots_[i] = e;
  }
}

void PairMap::put(int32_t a, int32_t b, int32_t rank, int32_t merged_id) {
  if ((size_ + 1) * 8 > slots_.size() * 5) reserve(2 * (size_ + 1));
  if (size_t(rank) >= merged_.size()) merged_.resize(size_t(rank) + 1, -1);
  merged_[rank] = merged_id;
  const uint64_t key = (uint64_t(uint32_t(a)) << 21) | uint32_t(b);
  const uint64_t entry = (key << 21) | uint32_t(rank);
  for (size_t i = slot(key);; i = (i + 1) & mask_) {
    if (slots_[i] == kEmpty) {
      slots_[i] = entry;
      ++size_;
      return;
    }
    if ((slots_[i] >> 21) == key) {
      slots_[i] = entry;
      return;
    }
  }
}

// ---- PieceCache --------------------------------------------------------------------------------

struct alignas(64) PieceCache::Entry {
  uint32_t hash;
  uint8_t key_len, n_ids;  // key_len 0: empty
  char key[PieceCache::kMaxKeyBytes];
  int32_t ids[PieceCache::kMaxIds];
};
static_assert(sizeof(PieceCache::Entry) == 64);

namespace {
constexpr size_t kCacheEntries = 4096;  // 256 KiB per concurrent encode() call
}  // namespace

PieceCache::PieceCache() : entries_(new Entry[kCacheEntries]()) {}
PieceCache::~PieceCache() = default;

bool PieceCache::get(std::string_view key, uint32_t hash, std::vector<int32_t>& out) const {
  const Entry& e = entries_[hash & (kCacheEntries - 1)];
  if (e.key_len == 0 || e.hash != hash || e.key_len != key.size() ||
      std::memcmp(e.key, key.data(), key.size()) != 0)
    return false;
  out.insert(out.end(), e.ids, e.ids + e.n_ids);
  return true;
}

void PieceCache::put(std::string_view key, uint32_t hash, const int32_t* ids, size_t n) {
  if (key.empty() || key.size() > kMaxKeyBytes || n > kMaxIds) return;
  Entry& e = entries_[hash & (kCacheEntries - 1)];
  e.hash = hash;
  e.key_len = static_cast<uint8_t>(key.size());
  e.n_ids = static_cast<uint8_t>(n);
  std::memcpy(e.key, key.data(), key.size());
  std::memcpy(e.ids, ids, n * sizeof(int32_t));
}

// ---- AddedTrie ---------------------------------------------------------------------------------

void AddedTrie::add(const std::string& content, int32_t token_index) {
  int32_t node = 0;
  for (char ch : content) {
    const auto c = static_cast<unsigned char>(ch);
    int32_t next = -1;
    for (const auto& [k, v] : nodes_[node].next)
      if (k == c) next = v;
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_[node].next.emplace_back(c, next);
      nodes_.emplace_back();
    }
    node = next;
  }
  nodes_[node].token = token_index;
  first_[static_cast<unsigned char>(content[0])] = true;
}

int32_t AddedTrie::longest_at(std::string_view text, size_t pos, size_t& len) const {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    int32_t next = -1;
    for (const auto& [k, v] : nodes_[node].next)
      if (k == c) {
        next = v;
        break;
      }
    if (next < 0) break;
    node = next;
    if (nodes_[node].token >= 0) {
      best = nodes_[node].token;
      len = i + 1 - pos;
    }
  }
  return best;
}

}  // namespace detail

namespace {

// Splits `text` on the tokens of `trie` (leftmost-longest), honouring lstrip/rstrip: calls
// section(begin, end) for text between tokens and token(id) for each match.
template <typename Section, typename Token>
void split_added(std::string_view text, const detail::AddedTrie& trie,
                 const std::vector<detail::AddedToken>& added, Section&& section, Token&& token) {
  size_t start = 0;  // start of the pending section
  size_t i = 0;
  while (i < text.size()) {
    if (!trie.may_start(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    size_t len = 0;
    const int32_t k = trie.longest_at(text, i, len);
    if (k < 0) {
      ++i;
      continue;
    }
    const detail::AddedToken& t = added[k];
    size_t b = i, e = i + len;
    if (t.lstrip) {  // swallow white space on the left, back to the pending section's start
      while (b > start) {
        size_t p = b - 1;
        while (p > start && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80) --p;
        const auto st = unicode::utf8_next(text.substr(p, b - p));
        if (st.status != unicode::Utf8Step::kOk || !unicode::is_white_space(st.cp)) break;
        b = p;
      }
    }
    if (t.rstrip) {
      while (e < text.size()) {
        const auto st = unicode::utf8_next(text.substr(e));
        if (st.status != unicode::Utf8Step::kOk || !unicode::is_white_space(st.cp)) break;
        e += st.len;
      }
    }
    if (b > start) section(start, b);
    token(t.id);
    start = i = e;
  }
  if (start < text.size()) section(start, text.size());
}

}  // namespace

// Spaces at the start of `s`, at most `max` of them (the decoder's Strip).
size_t leading_spaces(std::string_view s, int32_t max) {
  size_t n = 0;
  while (n < s.size() && n < static_cast<size_t>(std::max(max, 0)) && s[n] == ' ') ++n;
  return n;
}

void Tokenizer::Impl::check_id(int32_t id, const char* what) const {
  if (id < 0 || id >= n_ids || !present[id])
    throw InvalidArgument(std::string(what) + ": token id " + std::to_string(id) +
                          (id < 0 || id >= n_ids
                               ? " is out of range [0, " + std::to_string(n_ids) + ")"
                               : " is not assigned in " + origin));
}

void Tokenizer::Impl::encode_raw(std::string_view text, std::vector<int32_t>& out,
                                 detail::EncodeScratch& sc) const {
  if (raw_trie.empty()) {
    encode_normalized(text, true, out, sc);
    return;
  }
  split_added(
      text, raw_trie, added,
      [&](size_t b, size_t e) { encode_normalized(text.substr(b, e - b), b == 0, out, sc); },
      [&](int32_t id) { out.push_back(id); });
}

std::string_view Tokenizer::Impl::normalize(std::string_view text, std::string& buf) const {
  if (nfc) {  // NFC alone: most text is already in NFC
    if (unicode::nfc_quick_check(text)) return text;
    buf = unicode::nfc(text);
    return buf;
  }
  if (norm.empty() || text.empty()) return text;  // Prepend leaves an empty section empty
  std::string cur(text);
  for (const NormStep& st : norm) {
    switch (st.kind) {
      case NormStep::kNfc:
        if (!unicode::nfc_quick_check(cur)) cur = unicode::nfc(cur);
        break;
      case NormStep::kPrepend:
        cur.insert(0, st.a);
        break;
      case NormStep::kReplace:
        cur = detail::replace_all(cur, st.a, st.b);
        break;
    }
  }
  buf = std::move(cur);
  return buf;
}

void Tokenizer::Impl::encode_normalized(std::string_view text, bool first,
                                        std::vector<int32_t>& out,
                                        detail::EncodeScratch& sc) const {
  std::string buf;
  text = normalize(text, buf);
  auto section = [&](std::string_view t, bool at_start) {
    if (sentencepiece) {
      sp_pretokenize(t, at_start, out, sc);
    } else {
      pretokenize(t, 0, out, sc);
    }
  };
  if (norm_trie.empty()) {
    section(text, first);
    return;
  }
  split_added(
      text, norm_trie, added,
      [&](size_t b, size_t e) { section(text.substr(b, e - b), first && b == 0); },
      [&](int32_t id) { out.push_back(id); });
}

void Tokenizer::Impl::pretokenize(std::string_view text, size_t level, std::vector<int32_t>& out,
                                  detail::EncodeScratch& sc) const {
  if (level == splits.size()) {
    bpe(text, out, sc);
    return;
  }
  splits[level].split(
      text, [&](size_t b, size_t e) { pretokenize(text.substr(b, e - b), level + 1, out, sc); });
}

void Tokenizer::Impl::bpe(std::string_view bytes, std::vector<int32_t>& out,
                          detail::EncodeScratch& sc) const {
  const size_t n = bytes.size();
  if (n == 0) return;
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  if (n == 1) {
    out.push_back(byte_id[s[0]]);
    return;
  }
  if (ignore_merges) {
    auto it = bytes_to_id.find(bytes);
    if (it != bytes_to_id.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = n <= detail::PieceCache::kMaxKeyBytes;
  uint32_t hash = 0;
  if (cacheable) {
    hash = detail::piece_hash(bytes);
    if (sc.cache.get(bytes, hash, out)) return;
  }
  const size_t first = out.size();
  if (n <= kSmallPiece) {
    bpe_small(s, n, out);
  } else {
    bpe_large(s, n, out, sc);
  }
  if (cacheable) sc.cache.put(bytes, hash, out.data() + first, out.size() - first);
}

// Merges by rank over a compact array: one hash lookup per new adjacent pair, a linear scan for
// the lowest rank (leftmost on ties). Fast for the short pieces that dominate real text.
void Tokenizer::Impl::bpe_small(const unsigned char* s, size_t n, std::vector<int32_t>& out) const {
  int32_t sym[kSmallPiece];   // [n] current symbols
  int32_t rank[kSmallPiece];  // [n-1] rank of (sym[i], sym[i+1]), INT_MAX when not mergeable
  for (size_t i = 0; i < n; ++i) sym[i] = byte_id[s[i]];
  auto look = [&](size_t i) {
    const int32_t r = merges.rank(sym[i], sym[i + 1]);
    rank[i] = r >= 0 ? r : INT_MAX;
  };
  for (size_t i = 0; i + 1 < n; ++i) {
    const int32_t r = byte_pair_rank[(size_t(s[i]) << 8) | s[i + 1]];
    rank[i] = r >= 0 ? r : INT_MAX;
  }
  size_t count = n;
  while (count > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < count; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == INT_MAX) break;
    sym[best] = merges.merged(rank[best]);
    const size_t tail = count - best - 2;  // symbols after best+1
    std::memmove(sym + best + 1, sym + best + 2, tail * sizeof(int32_t));
    std::memmove(rank + best + 1, rank + best + 2, (tail > 0 ? tail - 1 : 0) * sizeof(int32_t));
    --count;
    if (best > 0) look(best - 1);
    if (best + 1 < count) look(best);
  }
  out.insert(out.end(), sym, sym + count);
}

// Linked list of symbols + a min-heap of candidate merges (rank, position), validated on pop:
// O(n log n) for long pieces such as unbroken CJK runs.
void Tokenizer::Impl::bpe_large(const unsigned char* s, size_t n, std::vector<int32_t>& out,
                                detail::EncodeScratch& sc) const {
  using Cand = detail::MergeCand;
  auto& sym = sc.sym;
  auto& next = sc.next;
  auto& heap = sc.heap;
  sym.resize(n);
  sc.link(n);
  heap.clear();
  const auto later = [](const Cand& x, const Cand& y) { return x > y; };
  for (size_t i = 0; i < n; ++i) sym[i] = byte_id[s[i]];
  for (size_t i = 0; i + 1 < n; ++i) {
    const int32_t r = byte_pair_rank[(size_t(s[i]) << 8) | s[i + 1]];
    if (r >= 0) heap.push_back({r, int32_t(i), sym[i], sym[i + 1]});
  }
  std::make_heap(heap.begin(), heap.end(), later);
  merge_heap(sc);
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(sym[i]);
  sc.release_if_huge(n);
}

void Tokenizer::Impl::merge_heap(detail::EncodeScratch& sc) const {
  using Cand = detail::MergeCand;
  auto& sym = sc.sym;
  auto& prev = sc.prev;
  auto& next = sc.next;
  auto& heap = sc.heap;
  const auto later = [](const Cand& x, const Cand& y) { return x > y; };
  auto push = [&](int32_t i) {
    const int32_t j = next[i];
    if (j < 0 || sym[i] < 0 || sym[j] < 0) return;
    const int32_t r = merges.rank(sym[i], sym[j]);
    if (r < 0) return;
    heap.push_back({r, i, sym[i], sym[j]});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  // An absorbed symbol gets a value no token and no placeholder has.
  constexpr int32_t kGone = INT32_MIN;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Cand c = heap.back();
    heap.pop_back();
    const int32_t i = c.pos, j = next[i];
    // Stale entry: the left symbol was absorbed or one side changed since the push.
    if (sym[i] != c.left || j < 0 || sym[j] != c.right) continue;
    sym[i] = merges.merged(c.rank);
    sym[j] = kGone;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    if (prev[i] >= 0) push(prev[i]);
    push(i);
  }
}

// ---- Tokenizer ---------------------------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::string& path) {
  return from_json(read_file(path, {.what = "tokenizer file", .max_bytes = kMaxJsonFileBytes}),
                   path);
}

Tokenizer Tokenizer::from_json(std::string_view text, const std::string& origin) {
  auto impl = std::make_unique<Impl>();
  impl->origin = origin;
  load_tokenizer_json(text, *impl);
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  auto sc = impl_->scratch.acquire();
  if (unicode::is_valid_utf8(text)) {
    impl_->encode_raw(text, ids, *sc);
  } else {
    impl_->encode_raw(unicode::sanitize_utf8(text), ids, *sc);
  }
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  for (int32_t id : ids) {
    impl_->check_id(id, "decode");
    if (skip_special && impl_->special[id]) continue;
    bytes += impl_->bytes_of(id);
  }
  std::string text =
      unicode::is_valid_utf8(bytes) ? std::move(bytes) : unicode::sanitize_utf8(bytes);
  text.erase(0, leading_spaces(text, impl_->strip_leading));
  return text;
}

int32_t Tokenizer::leading_spaces_stripped() const {
  return impl_->strip_leading;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  impl_->check_id(id, "token_bytes");
  return std::string(impl_->bytes_of(id));
}

std::string Tokenizer::id_to_piece(int32_t id) const {
  impl_->check_id(id, "id_to_piece");
  return std::string(impl_->piece_of(id));
}

std::optional<int32_t> Tokenizer::piece_to_id(std::string_view piece) const {
  const int32_t id = impl_->find_piece(piece);
  if (id < 0) return std::nullopt;
  return id;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < impl_->n_ids && impl_->special[id];
}

int32_t Tokenizer::vocab_size() const {
  return impl_->n_ids;
}

void Tokenizer::clear_cache() const {
  impl_->scratch.clear();
}

// ---- StreamingDetokenizer ----------------------------------------------------------------------

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tok, bool skip_special)
    : tok_(&tok), skip_special_(skip_special), strip_(tok.leading_spaces_stripped()) {}

std::string StreamingDetokenizer::strip(std::string out) {
  if (strip_ == 0 || out.empty()) return out;
  const size_t cut = leading_spaces(out, strip_);
  // Spaces are stripped only at the very start: after the first other character, none.
  strip_ = cut < out.size() ? 0 : strip_ - static_cast<int32_t>(cut);
  out.erase(0, cut);
  return out;
}

std::string StreamingDetokenizer::push(int32_t id) {
  if (skip_special_ && tok_->is_special(id)) return {};
  pending_ += tok_->token_bytes(id);
  // Emit everything except a trailing sequence that is valid so far but unfinished.
  size_t i = 0, cut = 0;
  while (i < pending_.size()) {
    const auto st = unicode::utf8_next(std::string_view(pending_).substr(i));
    if (st.status == unicode::Utf8Step::kTruncated) break;
    i += st.len;
    cut = i;
  }
  if (cut == 0) return {};
  std::string out = unicode::sanitize_utf8(std::string_view(pending_).substr(0, cut));
  pending_.erase(0, cut);
  return strip(std::move(out));
}

std::string StreamingDetokenizer::flush() {
  std::string out = unicode::sanitize_utf8(pending_);
  pending_.clear();
  return strip(std::move(out));
}

}  // namespace mmrt::io
