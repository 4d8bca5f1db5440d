#include "batch_runner.h"
#include "test_model.h"

#include <algorithm>

#include "core/clock.h"
#include "core/error.h"
#include "io/tokenizer.h"
#include "models/decoder/decoder.h"

namespace mmrt::engine {

namespace {

struct Seq {
  const TextRequest* req = nullptr;
  std::vector<int32_t> blocks;
  int64_t prefilled = 0;  // prompt tokens already in the cache
  std::vector<int32_t> generated;
  int32_t pending = -1;  // sampled token not yet fed to the model
  bool done = false;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<io::StreamingDetokenizer> detok;
  std::unique_ptr<StopStringMatcher> stops;
  TextResult result;
  std::vector<int32_t> chunk_pos;   // [3, n] positions of the current prefill chunk
  std::vector<int32_t> chunk_rows;  // embed rows of the current chunk, relative to it
  int64_t kv_len() const {
    return prefilled + static_cast<int64_t>(generated.size()) - (pending >= 0 ? 1 : 0);
  }
};

}  // namespace

std::vector<TextResult> run_text_batch(models::Session& model, const io::Tokenizer& tok,
                                       const std::vector<TextRequest>& requests,
                                       const BatchRunnerOptions& opts, RunStats* stats) {
  const auto& kvc = model.kv().config();
  const int64_t bs = kvc.block_size;
  std::vector<Seq> seqs(requests.size());
  int32_t next_block = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const TextRequest& r = requests[i];
    if (r.prompt.empty())
      throw InvalidArgument("request " + std::to_string(i) + " has an empty prompt");
    if (!r.positions.empty() && r.positions.size() != 3 * r.prompt.size())
      throw InvalidArgument("request " + std::to_string(i) +
                            ": positions must be [3, prompt length]");
    if (!r.embed_rows.empty() &&
        (r.embeds.rank() != 2 || r.embeds.dim(0) != static_cast<int64_t>(r.embed_rows.size())))
      throw InvalidArgument("request " + std::to_string(i) +
                            ": embeds must be [embed_rows, hidden]");
    r.sampling.validate();
    int64_t need = static_cast<int64_t>(r.prompt.size()) + r.sampling.max_tokens;
    int64_t nb = (need + bs - 1) / bs;
    if (next_block + nb > kvc.num_blocks)
      throw ResourceExhausted("KV cache too small: " + std::to_string(requests.size()) +
                              " requests need " + std::to_string(next_block + nb) + " blocks of " +
                              std::to_string(bs) + " tokens, the cache has " +
                              std::to_string(kvc.num_blocks));
    Seq& s = seqs[i];
    s.req = &r;
    for (int64_t b = 0; b < nb; ++b) s.blocks.push_back(next_block++);
    s.sampler = std::make_unique<Sampler>(r.sampling);
    s.detok = std::make_unique<io::StreamingDetokenizer>(tok);
    s.stops = std::make_unique<StopStringMatcher>(r.sampling.stop);
  }

  RunStats st;
  const int64_t t0 = now_ns();
  std::vector<models::SeqStep> steps;
  std::vector<size_t> owners;
  std::vector<int32_t> decode_tok(seqs.size());
  auto emit = [&](size_t i, const std::string& text) {
    if (text.empty()) return;
    seqs[i].result.text += text;
    if (opts.on_text) opts.on_text(i, text);
  };
  auto finish = [&](size_t i, const char* reason) {
    Seq& s = seqs[i];
    s.done = true;
    s.result.finish_reason = reason;
    s.result.end_ns = now_ns() - t0;
    if (!s.stops->finished()) emit(i, s.stops->push(s.detok->flush()));
    emit(i, s.stops->flush());
  };

  for (;;) {
    steps.clear();
    owners.clear();
    int64_t budget = opts.step_token_budget, prefill_tokens = 0;
    // Decode first: every running sequence feeds its last sampled token.
    for (size_t i = 0; i < seqs.size(); ++i) {
      Seq& s = seqs[i];
      if (s.done || s.pending < 0 || budget <= 0) continue;
      decode_tok[i] = s.pending;
      models::SeqStep st1;
      st1.tokens = {&decode_tok[i], 1};
      st1.kv_before = static_cast<int32_t>(s.kv_len());
      st1.rope_delta = s.req->rope_delta;
      st1.block_table = s.blocks;
      steps.push_back(st1);
      owners.push_back(i);
      --budget;
    }
    // Then prefill chunks of sequences still reading their prompt.
    for (size_t i = 0; i < seqs.size() && budget > 0; ++i) {
      Seq& s = seqs[i];
      const int64_t plen = static_cast<int64_t>(s.req->prompt.size());
      if (s.done || s.prefilled >= plen) continue;
      int64_t n = std::min(budget, plen - s.prefilled);
      models::SeqStep st1;
      st1.tokens = {s.req->prompt.data() + s.prefilled, static_cast<size_t>(n)};
      st1.kv_before = static_cast<int32_t>(s.prefilled);
      const TextRequest& r = *s.req;
      if (!r.positions.empty()) {
        s.chunk_pos.resize(static_cast<size_t>(3 * n));
        for (int64_t c = 0; c < 3; ++c)
          std::copy_n(r.positions.begin() + static_cast<long>(c * plen + s.prefilled), n,
                      s.chunk_pos.begin() + static_cast<long>(c * n));
        st1.positions = s.chunk_pos;
      }
      st1.rope_delta = r.rope_delta;
      if (!r.embed_rows.empty()) {
        auto lo = std::lower_bound(r.embed_rows.begin(), r.embed_rows.end(),
                                   static_cast<int32_t>(s.prefilled));
        auto hi = std::lower_bound(lo, r.embed_rows.end(), static_cast<int32_t>(s.prefilled + n));
        s.chunk_rows.clear();
        for (auto it = lo; it != hi; ++it)
          s.chunk_rows.push_back(*it - static_cast<int32_t>(s.prefilled));
        if (!s.chunk_rows.empty()) {
          st1.embed_rows = s.chunk_rows;
          st1.embeds = r.embeds.data<float>() + (lo - r.embed_rows.begin()) * r.embeds.dim(1);
        }
      }
      st1.block_table = s.blocks;
      st1.want_logits = s.prefilled + n == plen;
      steps.push_back(st1);
      owners.push_back(i);
      budget -= n;
      prefill_tokens += n;
    }
    if (steps.empty()) break;

    const int64_t ts = now_ns();
    Tensor logits = model.forward(steps);  // [n_want, vocab]
    const double dt = static_cast<double>(now_ns() - ts) * 1e-9;
    ++st.steps;
    (prefill_tokens > 0 ? st.prefill_seconds : st.decode_seconds) += dt;
    st.prompt_tokens += prefill_tokens;

    int64_t w = 0;
    const int64_t vocab = logits.dim(1);
    for (size_t k = 0; k < steps.size(); ++k) {
      Seq& s = seqs[owners[k]];
      if (steps[k].tokens.data() != &decode_tok[owners[k]])
        s.prefilled += static_cast<int64_t>(steps[k].tokens.size());
      else
        s.pending = -1;
      if (!steps[k].want_logits) continue;
      std::span<float> row(logits.data<float>() + w * vocab, static_cast<size_t>(vocab));
      ++w;
      int32_t t = s.sampler->sample(row, s.req->prompt);
      if (s.generated.empty()) s.result.first_token_ns = now_ns() - t0;
      ++st.generated_tokens;
      const auto& sp = s.req->sampling;
      bool is_stop = !sp.ignore_eos && (std::find(s.req->stop_ids.begin(), s.req->stop_ids.end(),
                                                  t) != s.req->stop_ids.end());
      is_stop |= std::find(sp.stop_token_ids.begin(), sp.stop_token_ids.end(), t) !=
                 sp.stop_token_ids.end();
      if (is_stop) {
        finish(owners[k], "stop");
        continue;
      }
      s.generated.push_back(t);
      s.result.tokens.push_back(t);
      emit(owners[k], s.stops->push(s.detok->push(t)));
      if (s.stops->finished()) {
        finish(owners[k], "stop");
      } else if (static_cast<int32_t>(s.generated.size()) >= sp.max_tokens) {
        finish(owners[k], "length");
      } else {
        s.pending = t;
      }
    }
  }
  if (stats) *stats = st;
  std::vector<TextResult> out;
  out.reserve(seqs.size());
  for (auto& s : seqs) out.push_back(std::move(s.result));
  return out;
}

}  // namespace mmrt::engine
