// The Unigram model (Fuyu's tokenizer.json; loading: tokenizer_load.cpp): the vocabulary trie and
// the Viterbi segmentation, in the order Hugging Face tokenizers' Unigram::encode_optimized
// visits the lattice, so ties resolve the same way.
#include <stdexcept>
#include <string>

#include "io/tokenizer_internal.h"

namespace mmrt::io {

namespace detail {

void ByteTrie::grow() {
  std::vector<uint64_t> old = std::move(slots_);
  const size_t cap = old.size() * 2;
  slots_.assign(cap, kEmpty);
  mask_ = cap - 1;
  --shift_;
  for (uint64_t e : old) {
    if (e == kEmpty) continue;
    size_t i = slot(e >> 24);
    while (slots_[i] != kEmpty) i = (i + 1) & mask_;
    slots_[i] = e;
  }
}

void ByteTrie::add(std::string_view s, int32_t id) {
  int32_t node = 0;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    int32_t next = child(node, c);
    if (next < 0) {
      if (ids_.size() >= size_t(kMaxNodes))
        throw std::length_error("more than " + std::to_string(kMaxNodes) + " trie nodes");
      next = static_cast<int32_t>(ids_.size());
      ids_.push_back(-1);
      if (node == 0) {
        root_[c] = next;
      } else {
        if ((used_ + 1) * 8 > slots_.size() * 5) grow();  // load factor <= 0.625
        const uint64_t key = (uint64_t(uint32_t(node)) << 8) | c;
        size_t i = slot(key);
        while (slots_[i] != kEmpty) i = (i + 1) & mask_;
        slots_[i] = (key << 24) | uint64_t(next);
        ++used_;
      }
    }
    node = next;
  }
  if (node != 0) ids_[size_t(node)] = id;
}

int32_t ByteTrie::find(std::string_view s) const {
  int32_t node = 0;
  for (char ch : s)
    if ((node = child(node, static_cast<unsigned char>(ch))) < 0) return -1;
  return node == 0 ? -1 : ids_[size_t(node)];
}

}  // namespace detail

// Viterbi over byte offsets: from each character boundary, in order, every vocabulary piece
// starting there (shortest first) offers its end a path of the start's score plus its own; a
// strictly better score wins, so among equals the earliest offer stays. A boundary no
// one-character piece leaves from offers the unknown token over that character.
void Tokenizer::Impl::sp_unigram(std::string_view piece, std::vector<int32_t>& out,
                                 detail::EncodeScratch& sc) const {
  const size_t n = piece.size();
  if (n == 0) return;
  const bool cacheable = n <= detail::PieceCache::kMaxKeyBytes;
  uint32_t hash = 0;
  if (cacheable) {
    hash = detail::piece_hash(piece);
    if (sc.cache.get(piece, hash, out)) return;
  }
  auto& best = sc.best;
  auto& from = sc.from;
  auto& id_at = sc.piece;
  best.assign(n + 1, 0.0);
  from.assign(n + 1, -1);
  id_at.assign(n + 1, -1);
  const auto* s = reinterpret_cast<const unsigned char*>(piece.data());
  const auto offer = [&](size_t end, size_t start, double score, int32_t id) {
    if (from[end] < 0 || score > best[end]) {
      best[end] = score;
      from[end] = static_cast<int32_t>(start);
      id_at[end] = id;
    }
  };
  for (size_t at = 0; at < n;) {
    const auto st = unicode::utf8_next(piece.substr(at));
    const size_t mblen = st.len > 0 ? st.len : 1;
    const double here = best[at];
    bool single = false;
    int32_t node = 0;
    for (size_t j = at; j < n; ++j) {
      if ((node = trie.child(node, s[j])) < 0) break;
      const int32_t id = trie.id(node);
      if (id < 0) continue;
      offer(j + 1, at, here + scores[size_t(id)], id);
      single = single || j + 1 - at == mblen;
    }
    if (!single) offer(at + mblen, at, here + unk_score, unk_id);
    at += mblen;
  }

  // The best path back to front, then its pieces in order; runs of unknown pieces fused.
  auto& ends = sc.sym;
  ends.clear();
  for (size_t e = n; e > 0; e = size_t(from[e])) ends.push_back(static_cast<int32_t>(e));
  const size_t first = out.size();
  bool in_run = false;
  size_t run_begin = 0, run_end = 0;  // the pending run of unknown pieces, [begin, end)
  const auto flush = [&] {
    if (!in_run) return;
    in_run = false;
    const std::string_view u = piece.substr(run_begin, run_end - run_begin);
    if (const int32_t id = trie.find(u); id >= 0) {
      out.push_back(id);
      return;
    }
    bool bytes = byte_fallback;
    for (unsigned char b : u) bytes = bytes && fallback_id[b] >= 0;
    if (!bytes) {
      out.push_back(unk_id);
      return;
    }
    for (unsigned char b : u) out.push_back(fallback_id[b]);
  };
  for (size_t k = ends.size(); k-- > 0;) {
    const auto e = static_cast<size_t>(ends[k]);
    const auto b = static_cast<size_t>(from[e]);
    if (id_at[e] == unk_id) {
      if (!in_run) run_begin = b;
      in_run = true;
      run_end = e;
      continue;
    }
    flush();
    out.push_back(id_at[e]);
  }
  flush();
  if (cacheable) sc.cache.put(piece, hash, out.data() + first, out.size() - first);
  sc.release_if_huge(n);
}

}  // namespace mmrt::io
