// The merge loop shared by the BPE trainers (byte-level: bpe_trainer.cpp; SentencePiece-style:
// sp_trainer.cpp): most frequent adjacent pair first, weighted by word counts.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace mmrt::io::detail {

struct BpeWord {
  std::vector<int32_t> sym;  // [n_symbols] current token ids
  int64_t freq = 0;
};

// Repeatedly merges the most frequent adjacent pair of `words` (ties: the smaller (left, right)
// id pair) until `tokens` holds `vocab_size` strings or no pair is left. `tokens` ([n_tokens] the
// string of each id) grows by the merged strings; a merge whose string is already a token reuses
// its id (the merge is still recorded). Pairs whose merged string `allowed` rejects are never
// merged (empty: all are allowed). Returns the merges (left id, right id) in rank order; `words`
// ends up segmented.
std::vector<std::pair<int32_t, int32_t>> learn_bpe_merges(
    std::vector<BpeWord>& words, std::vector<std::string>& tokens, int32_t vocab_size,
    const std::function<bool(const std::string&)>& allowed);

}  // namespace mmrt::io::detail
