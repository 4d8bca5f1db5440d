// SentencePiece-style BPE (Llama, Mistral): the Metaspace pre-tokenizer and character-level
// merges with byte fallback (loading: tokenizer_load.cpp; the rest of encode: tokenizer.cpp;
// the Unigram model: tokenizer_unigram.cpp).
#include <algorithm>
#include <climits>
#include <string>

#include "io/tokenizer_internal.h"

namespace mmrt::io {

void Tokenizer::Impl::sp_pretokenize(std::string_view text, bool first, std::vector<int32_t>& out,
                                     detail::EncodeScratch& sc) const {
  if (!metaspace.on) {
    sp_model(text, out, sc);
    return;
  }
  const std::string& rep = metaspace.replacement;
  std::string s = detail::replace_all(text, " ", rep);
  const bool prepend =
      metaspace.prepend == Metaspace::kAlways || (metaspace.prepend == Metaspace::kFirst && first);
  if (prepend && !s.starts_with(rep)) s.insert(0, rep);
  if (!metaspace.split) {
    sp_model(s, out, sc);
    return;
  }
  // A piece per word, each starting at a replacement (merged with the word after it).
  size_t b = 0;
  for (size_t f = s.find(rep, 1); f != std::string::npos; f = s.find(rep, f + rep.size())) {
    sp_model(std::string_view(s).substr(b, f - b), out, sc);
    b = f;
  }
  sp_model(std::string_view(s).substr(b), out, sc);
}

void Tokenizer::Impl::sp_model(std::string_view piece, std::vector<int32_t>& out,
                               detail::EncodeScratch& sc) const {
  if (unigram)
    sp_unigram(piece, out, sc);
  else
    sp_bpe(piece, out, sc);
}

// BPE over the characters of `piece`: each known character is its token, an unknown one a
// placeholder (negative: never merged); merges by rank, leftmost first; then the placeholders
// become the character's <0xNN> byte tokens (or the unknown token, consecutive ones fused).
void Tokenizer::Impl::sp_bpe(std::string_view piece, std::vector<int32_t>& out,
                             detail::EncodeScratch& sc) const {
  if (piece.empty()) return;
  const bool cacheable = piece.size() <= detail::PieceCache::kMaxKeyBytes;
  uint32_t hash = 0;
  if (cacheable) {
    hash = detail::piece_hash(piece);
    if (sc.cache.get(piece, hash, out)) return;
  }
  using Cand = detail::MergeCand;
  auto& sym = sc.sym;
  auto& next = sc.next;
  auto& heap = sc.heap;
  auto& char_at = sc.char_at;
  sym.clear();
  char_at.clear();
  for (size_t i = 0; i < piece.size();) {
    const auto st = unicode::utf8_next(piece.substr(i));
    const size_t len = st.len > 0 ? st.len : 1;
    const int32_t id = find_piece(piece.substr(i, len));
    char_at.push_back(static_cast<uint32_t>(i));
    sym.push_back(id >= 0 ? id : -1);
    i += len;
  }
  const size_t n = sym.size();
  char_at.push_back(static_cast<uint32_t>(piece.size()));
  sc.link(n);
  heap.clear();
  const auto later = [](const Cand& x, const Cand& y) { return x > y; };
  for (size_t i = 0; i + 1 < n; ++i)
    if (sym[i] >= 0 && sym[i + 1] >= 0)
      if (const int32_t r = merges.rank(sym[i], sym[i + 1]); r >= 0)
        heap.push_back({r, int32_t(i), sym[i], sym[i + 1]});
  std::make_heap(heap.begin(), heap.end(), later);
  merge_heap(sc);
  const size_t first = out.size();
  for (int32_t i = 0; i >= 0; i = next[i]) {
    if (sym[i] >= 0) {
      out.push_back(sym[i]);
      continue;
    }
    const std::string_view ch = piece.substr(char_at[i], char_at[i + 1] - char_at[i]);
    bool bytes = byte_fallback;
    for (unsigned char b : ch) bytes = bytes && fallback_id[b] >= 0;
    if (bytes) {
      for (unsigned char b : ch) out.push_back(fallback_id[b]);
    } else if (!(fuse_unk && out.size() > first && out.back() == unk_id)) {
      out.push_back(unk_id);
    }
  }
  if (cacheable) sc.cache.put(piece, hash, out.data() + first, out.size() - first);
  sc.release_if_huge(n);
}

}  // namespace mmrt::io
