#include "bench_encoder_sensitivity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/clock.h"
#include "core/error.h"
#include "io/tokenizer.h"
#include "bench_workload.h"
#include "logprobs.h"

namespace mmrt::cli {
namespace {

struct Outcome {
  std::vector<float> encoded;      // the encoder's output, host
  std::vector<double> first;       // log-probabilities of the first token
  double encode_ms = 0;
};

// The item through `lm`'s encoder, then a one-image prompt through its decoder.
Outcome run(Lm& lm, const io::Tokenizer& tok, const models::PreparedMedia& item) {
  Outcome o;
  Stopwatch sw;
  const Tensor feats = lm.runner().encode(item);
  o.encode_ms = sw.millis();
  const Tensor host = lm.backend().to_host(feats);
  o.encoded.assign(host.data<float>(), host.data<float>() + host.numel());
  models::ChatMessage user;
  user.role = "user";
  user.content = {{models::ContentPart::Kind::kImage, ""},
                  {models::ContentPart::Kind::kText, "Describe this image in one sentence."}};
  const models::ExpandedPrompt p = lm.processor().expand(lm.processor().chat_ids(tok, {user}),
                                                          {&item, 1});
  const auto S = static_cast<int64_t>(p.ids.size());
  std::vector<int32_t> rows(static_cast<size_t>(item.n_tokens));
  for (size_t r = 0; r < rows.size(); ++r)
    rows[r] = static_cast<int32_t>(p.spans.at(0).begin + static_cast<int64_t>(r));
  const Tensor logits =
      lm.prefill({.ids = p.ids,
                  .positions = p.positions,
                  .position_rows = static_cast<int>(p.positions.size() / static_cast<size_t>(S)),
                  .media_rows = rows,
                  .media = &feats},
                 512, lm.block_table(0, S + 1));
  o.first = log_softmax(logits.data<float>(), logits.dim(1));
  return o;
}

// max |a - b| / max |b|.
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double mx = 0, me = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    mx = std::max(mx, std::fabs(static_cast<double>(b[i])));
    me = std::max(me, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return mx > 0 ? me / mx : me;
}

}  // namespace

void bench_encoder_sensitivity(const kernels::Backend& be, const media::HostContext& host,
                               const std::string& dir, const models::LoadOptions& base,
                               const engine::KvOptions& kvo, int image_side) {
  const io::Tokenizer tok = io::Tokenizer::from_file(dir + "/tokenizer.json");
  models::LoadOptions o = base;
  o.encoder_weights = "bf16";
  o.encoder_int8_block = -1;
  std::unique_ptr<Lm> lm = load_lm(be, dir, o, kvo);
  if (!lm->spec().takes(models::Modality::kImage))
    throw InvalidArgument("--encoder-sensitivity: the model takes no images (" +
                          lm->spec().family + ")");
  const int64_t depth = lm->spec().encoder_blocks;
  const auto png = synthetic_png(image_side, image_side, 3);
  const models::PreparedMedia item =
      lm->processor().preprocess(models::Modality::kImage, png, host.media_context());
  const Outcome ref = run(*lm, tok, item);
  std::printf(
      "== encoder sensitivity: one block at a time in int8 (%lld blocks; %dx%d image, %lld "
      "tokens), against the encoder in %s\n"
      "   rel err = max |out - ref| / max |ref| of the encoder's output; KL = KL(ref || this) of "
      "the first token's distribution after a one-image prompt, in nats; top1 = same argmax\n",
      static_cast<long long>(depth), image_side, image_side,
      static_cast<long long>(item.n_tokens), lm->spec().encoder_precision.c_str());
  std::printf("   %-48s %10s %10s %5s %12s\n", "encoder", "rel err", "KL", "top1",
              "enc ms cold");
  lm.reset();
  auto report = [&](const models::LoadOptions& lo) {
    std::unique_ptr<Lm> q = load_lm(be, dir, lo, kvo);
    const Outcome r = run(*q, tok, item);
    std::printf("   %-48s %10.2e %10.2e %5s %12.1f\n", q->spec().encoder_precision.c_str(),
                rel_err(r.encoded, ref.encoded), kl(ref.first, r.first),
                argmax(r.first) == argmax(ref.first) ? "yes" : "no", r.encode_ms);
    std::fflush(stdout);
  };
  o.encoder_weights = "int8";
  for (int64_t i = 0; i < depth; ++i) {
    o.encoder_int8_block = i;
    report(o);
  }
  o.encoder_int8_block = -1;
  report(o);  // what --encoder-weights int8 --encoder-keep-last N runs
  std::printf(
      "   (a random checkpoint's distributions are nearly flat: a quality claim needs the real "
      "checkpoint; run this on yours)\n");
}

}  // namespace mmrt::cli
