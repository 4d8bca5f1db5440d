// Internal state of Tokenizer (not a public header): vocabulary tables, merge ranks, added
// tokens, the pre-tokenizer and the bounded pre-token cache.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/state_pool.h"
#include "io/tokenizer.h"
#include "io/unicode.h"

namespace mmrt::io::detail {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;
// Keys point into storage owned elsewhere (Tokenizer::Impl's blobs).
using ViewMap = std::unordered_map<std::string_view, int32_t, StringHash, std::equal_to<>>;

// Merge ranks: an open-addressing table of 8-byte slots [a:21 bits | b:21 | rank:21] (2 MiB for
// Qwen's 151k merges, so most probes hit the cache) plus the merged id of each rank.
class PairMap {
 public:
  static constexpr int32_t kMaxValue = (1 << 21) - 2;  // largest id / rank it can hold
  void reserve(size_t n);
  // Inserts or overwrites (a later duplicate merge wins, as in Hugging Face tokenizers).
  void put(int32_t a, int32_t b, int32_t rank, int32_t merged_id);
  // Rank of the merge (a, b), or -1 when the pair does not merge.
  int32_t rank(int32_t a, int32_t b) const {
    const uint64_t key = (uint64_t(uint32_t(a)) << 21) | uint32_t(b);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      const uint64_t e = slots_[i];
      if ((e >> 21) == key) return int32_t(e & kField);
      if (e == kEmpty) return -1;
    }
  }
  int32_t merged(int32_t rank) const { return merged_[rank]; }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kField = (1u << 21) - 1;
  static constexpr uint64_t kEmpty = ~0ull;
  size_t slot(uint64_t key) const {
    return size_t((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }
  std::vector<uint64_t> slots_ = std::vector<uint64_t>(16, kEmpty);  // power-of-two capacity
  std::vector<int32_t> merged_;                                      // [n_ranks] merged id
  size_t mask_ = 15, size_ = 0;
  int shift_ = 60;
};

// Open-addressing index from a string to an id; the strings themselves live elsewhere and are
// fetched through `key_of(id)` (no per-entry allocation: loading 150k pieces stays cheap).
class PieceIndex {
 public:
  void reset(size_t expected) {
    size_t cap = 16;
    while (cap < 2 * expected + 2) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    size_ = 0;
    limit_ = expected;
  }
  template <typename KeyOf>
  int32_t find(std::string_view s, const KeyOf& key_of) const {
    if (slots_.empty()) return -1;
    const size_t h = StringHash{}(s);
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& e = slots_[i];
      if (e.id < 0) return -1;
      if (e.tag == tag && key_of(e.id) == s) return e.id;
    }
  }
  // Inserts, or re-points an existing equal string to `id`. At most reset()'s `expected` keys.
  template <typename KeyOf>
  void put(std::string_view s, int32_t id, const KeyOf& key_of) {
    const size_t h = StringHash{}(s);
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& e = slots_[i];
      if (e.id < 0) {
        if (size_ >= limit_) throw std::logic_error("PieceIndex: more keys than reserved");
        e = {tag, id};
        ++size_;
        return;
      }
      if (e.tag == tag && key_of(e.id) == s) {
        e.id = id;
        return;
      }
    }
  }

 private:
  struct Slot {
    uint32_t tag = 0;
    int32_t id = -1;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0, size_ = 0, limit_ = 0;
};

// Direct-mapped cache of short pre-token bytes -> token ids: no locks, no allocation, one
// 64-byte line per entry. Each EncodeScratch has its own; the tokenizer owns them all.
class PieceCache {
 public:
  static constexpr size_t kMaxKeyBytes = 26, kMaxIds = 6;
  PieceCache();
  ~PieceCache();
  // Appends the cached ids to `out` and returns true on a hit.
  bool get(std::string_view key, uint32_t hash, std::vector<int32_t>& out) const;
  void put(std::string_view key, uint32_t hash, const int32_t* ids, size_t n);

  struct Entry;

 private:
  std::unique_ptr<Entry[]> entries_;
};

// Candidate merge of the heap-based BPE loop: (rank, position) with the two symbols it joins.
struct MergeCand {
  int32_t rank, pos, left, right;
  bool operator>(const MergeCand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

// Working state of one encode() call, leased from the tokenizer's pool: the piece cache (which
// survives from call to call in the state) and the merge loop's buffers.
struct EncodeScratch {
  PieceCache cache;
  std::vector<int32_t> sym, prev, next;  // [n] symbol id and neighbours (-1: none)
  std::vector<MergeCand> heap;           // min-heap by (rank, pos)
  std::vector<uint32_t> char_at;         // SentencePiece: byte offset of each symbol's character
  // Unigram's Viterbi lattice, per byte offset [n + 1]: the best path's score up to there, where
  // its last piece starts (-1: none yet) and that piece's id.
  std::vector<double> best;
  std::vector<int32_t> from, piece;
  // prev / next as a list of n symbols in order.
  void link(size_t n) {
    prev.resize(n);
    next.resize(n);
    for (size_t i = 0; i < n; ++i) {
      prev[i] = static_cast<int32_t>(i) - 1;
      next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
    }
  }
  // Do not keep megabytes per thread after a huge piece.
  void release_if_huge(size_t n) {
    if (n <= (size_t(1) << 16)) return;
    sym = {};
    prev = {};
    next = {};
    heap = {};
    char_at = {};
    best = {};
    from = {};
    piece = {};
  }
};

// `s` with every occurrence of the non-empty literal `from` replaced by `to`.
inline std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  for (size_t f; (f = s.find(from, i)) != std::string_view::npos; i = f + from.size())
    out.append(s, i, f - i).append(to);
  out.append(s, i, std::string_view::npos);
  return out;
}

// FNV-1a over the (short) piece, then a final mix so the low bits pick the cache slot well.
inline uint32_t piece_hash(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  return static_cast<uint32_t>(h >> 32);
}

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false, lstrip = false, rstrip = false, normalized = false, single_word = false;
};

// Byte trie over added-token contents: leftmost-longest matching.
class AddedTrie {
 public:
  void add(const std::string& content, int32_t token_index);
  bool empty() const { return nodes_.size() <= 1; }
  // Longest token starting at text[pos]: returns its index into the added-token list and sets
  // `len`, or -1 when none starts there.
  int32_t longest_at(std::string_view text, size_t pos, size_t& len) const;
  bool may_start(unsigned char c) const { return first_[c]; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> next;
    int32_t token = -1;
  };
  std::vector<Node> nodes_{Node{}};
  std::array<bool, 256> first_{};
};

// Byte trie over the vocabulary strings, for Unigram's common-prefix search: children in one
// open-addressing table keyed by (node, byte), so 262k pieces (Fuyu: ~1M nodes) take ~16 MiB.
class ByteTrie {
 public:
  static constexpr int32_t kMaxNodes = (1 << 24) - 1;
  // Adds `s` (non-empty) with `id` (a later add of the same string overwrites it). Throws
  // std::length_error past kMaxNodes nodes.
  void add(std::string_view s, int32_t id);
  // The child of `node` by byte `c`, or -1. The root is node 0.
  int32_t child(int32_t node, unsigned char c) const {
    if (node == 0) return root_[c];
    const uint64_t key = (uint64_t(uint32_t(node)) << 8) | c;
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      const uint64_t e = slots_[i];
      if (e == kEmpty) return -1;
      if ((e >> 24) == key) return int32_t(e & kChild);
    }
  }
  int32_t id(int32_t node) const { return ids_[size_t(node)]; }  // -1: no string ends there
  // The id of exactly `s`, or -1.
  int32_t find(std::string_view s) const;
  size_t nodes() const { return ids_.size(); }

 private:
  static constexpr uint64_t kEmpty = ~0ull, kChild = (1u << 24) - 1;
  size_t slot(uint64_t key) const {
    return size_t((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }
  void grow();
  std::array<int32_t, 256> root_ = [] {
    std::array<int32_t, 256> r{};
    r.fill(-1);
    return r;
  }();
  std::vector<uint64_t> slots_ = std::vector<uint64_t>(16, kEmpty);  // [key:40 | child:24]
  size_t mask_ = 15, used_ = 0;
  int shift_ = 60;
  std::vector<int32_t> ids_ = std::vector<int32_t>(1, -1);  // [n_nodes]
};

}  // namespace mmrt::io::detail

namespace mmrt::io {

struct Tokenizer::Impl {
  std::string origin;  // file name (or the caller's label) for error messages
  int32_t n_ids = 0;   // max id + 1 over vocab and added tokens

  // Per id [n_ids]: the stored vocabulary string, the raw bytes it stands for, flags.
  std::string piece_blob;                                 // vocabulary strings, any order
  std::vector<std::pair<uint32_t, uint32_t>> piece_span;  // [n_ids] (offset, length)
  std::string bytes_blob;
  std::vector<uint32_t> bytes_off;  // [n_ids + 1] offsets into bytes_blob
  std::vector<uint8_t> present;     // 1 when the id exists (vocab or added)
  std::vector<uint8_t> special;     // 1 for added tokens with special=true

  detail::PieceIndex piece_index;      // vocab strings and added contents -> id
  detail::ViewMap bytes_to_id;         // raw bytes of ordinary tokens, only built for ignore_merges
  std::array<int32_t, 256> byte_id{};  // the token of each single byte
  detail::PairMap merges;
  std::vector<int32_t> byte_pair_rank;  // [256 * 256] rank of merging two byte tokens, or -1
  bool ignore_merges = false;

  std::vector<detail::AddedToken> added;
  detail::AddedTrie raw_trie;   // added tokens with normalized=false, matched on raw text
  detail::AddedTrie norm_trie;  // normalized=true, matched after the normalizer
  bool nfc = false;             // the normalizer is NFC alone (the byte-level fast path)
  // The normalizer's steps in order (NFC, Prepend, Replace of a literal string).
  struct NormStep {
    enum Kind { kNfc, kPrepend, kReplace } kind;
    std::string a, b;  // kPrepend: a; kReplace: a -> b
  };
  std::vector<NormStep> norm;
  std::vector<unicode::SplitRegex> splits;  // applied in order, each re-splitting the pieces

  // SentencePiece-style BPE (Llama, Mistral): the vocabulary is text with U+2581 for spaces,
  // merges run over characters, a character outside the vocabulary becomes its UTF-8 bytes as
  // <0xNN> tokens (byte_fallback) or the unknown token. The byte-level tables above are unused.
  bool sentencepiece = false;
  bool byte_fallback = false, fuse_unk = false;
  int32_t unk_id = -1;
  std::array<int32_t, 256> fallback_id{};  // the <0xNN> token of each byte, -1: none
  // Metaspace pre-tokenizer: spaces become `replacement`, which is prepended to the first
  // section of the text (kFirst) or to every section (kAlways); split: a piece per word.
  struct Metaspace {
    bool on = false;
    std::string replacement = "\xe2\x96\x81";
    enum Prepend { kAlways, kFirst, kNever } prepend = kAlways;
    bool split = false;
  } metaspace;
  int32_t strip_leading = 0;  // the decoder's Strip: leading spaces removed from decode()

  // Unigram model (Fuyu; sentencepiece is set too): the vocabulary's log-probabilities and the
  // Viterbi segmentation over them, as Hugging Face tokenizers' Unigram encodes: a character no
  // piece covers costs unk_score (the lowest score - 10); consecutive unknown characters fuse
  // into one piece, then become its UTF-8 bytes' <0xNN> tokens (byte_fallback) or unk_id.
  bool unigram = false;
  std::vector<double> scores;  // [n_ids] (0 for added-token-only ids)
  double unk_score = 0;
  detail::ByteTrie trie;  // the vocabulary strings (not the added tokens)

  StatePool<detail::EncodeScratch> scratch;  // one per concurrent encode() call

  std::string_view piece_of(int32_t id) const {
    return std::string_view(piece_blob).substr(piece_span[id].first, piece_span[id].second);
  }
  int32_t find_piece(std::string_view s) const {
    return piece_index.find(s, [this](int32_t id) { return piece_of(id); });
  }
  std::string_view bytes_of(int32_t id) const {
    return std::string_view(bytes_blob).substr(bytes_off[id], bytes_off[id + 1] - bytes_off[id]);
  }
  void check_id(int32_t id, const char* what) const;

  void encode_raw(std::string_view text, std::vector<int32_t>& out,
                  detail::EncodeScratch& sc) const;
  // `first`: the section starts the text (Metaspace's prepend_scheme "first").
  void encode_normalized(std::string_view text, bool first, std::vector<int32_t>& out,
                         detail::EncodeScratch& sc) const;
  std::string_view normalize(std::string_view text, std::string& buf) const;
  void sp_pretokenize(std::string_view text, bool first, std::vector<int32_t>& out,
                      detail::EncodeScratch& sc) const;
  // The SentencePiece-style model on one pre-tokenized piece: BPE, or Unigram's Viterbi.
  void sp_model(std::string_view piece, std::vector<int32_t>& out, detail::EncodeScratch& sc) const;
  void sp_bpe(std::string_view piece, std::vector<int32_t>& out, detail::EncodeScratch& sc) const;
  void sp_unigram(std::string_view piece, std::vector<int32_t>& out,
                  detail::EncodeScratch& sc) const;
  void pretokenize(std::string_view text, size_t level, std::vector<int32_t>& out,
                   detail::EncodeScratch& sc) const;
  static constexpr size_t kSmallPiece = 48;  // longer pieces use the heap-based merge loop
  void bpe(std::string_view bytes, std::vector<int32_t>& out, detail::EncodeScratch& sc) const;
  void bpe_small(const unsigned char* s, size_t n, std::vector<int32_t>& out) const;
  void bpe_large(const unsigned char* s, size_t n, std::vector<int32_t>& out,
                 detail::EncodeScratch& sc) const;
  // The merge loop over sc's linked symbols (sym / prev / next) and its initial candidate heap;
  // negative symbols never merge.
  void merge_heap(detail::EncodeScratch& sc) const;
};

// Parses and validates tokenizer.json text into `impl` (tokenizer_load.cpp).
void load_tokenizer_json(std::string_view text, Tokenizer::Impl& impl);

}  // namespace mmrt::io
