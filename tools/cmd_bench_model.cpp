// `mmrt bench-model`: the runtime's speed on one checkpoint, each figure next to the machine's
// own limit measured in the same run: memory read bandwidth, prefill tokens/s, decode tokens/s at
// batch 1 and 8 (weight bytes/s as a fraction of the bandwidth), int8 weights, the vision tower,
// the audio preprocessing and encoder (bench_audio_encoder.h), and the engine at several
// concurrency levels with a repeated-image second turn.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_audio_encoder.h"
#include "bench_encoder_sensitivity.h"
#include "bench_lm.h"
#include "bench_workload.h"
#include "cli.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/step_graphs.h"
#include "kernels/cpu/bandwidth.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/linear.h"
#include "media/image.h"
#include "model_options.h"
#include "models/registry.h"
#include "obs/report.h"

namespace mmrt::cli {
namespace {

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v)
    x = static_cast<int32_t>(rng() % static_cast<uint32_t>(std::min<int64_t>(vocab, 1 << 30)));
  return v;
}

struct DecodeFigures {
  double prefill_tok_s = 0, decode_b1_tok_s = 0, decode_b8_tok_s = 0;
  double b1_weight_gbs = 0;
  // Batch-1 steps paired with a bandwidth window read right after each one: per pair, the
  // step's weight rate over the window's read rate (both under the same machine load).
  std::vector<double> b1_paired;
};

using obs::median;

// One decoder step, complete on return (a device's queued work waited for, as a step whose
// tokens are sampled is).
// A decode step is replayed as its step graph where `g` has one.
Tensor step(Lm& lm, std::span<const models::SeqStep> batch, engine::StepGraphs* g = nullptr) {
  Tensor logits = g ? g->forward(batch) : lm.forward(batch);
  lm.backend().synchronize();
  return logits;
}

// probe: a CPU's paired bandwidth windows (null on a device).
DecodeFigures run_lm(Lm& lm, int64_t prompt_len, int steps, kernels::ReadStreamer* probe,
                     engine::StepGraphs* graphs) {
  DecodeFigures f;
  const int64_t V = lm.spec().vocab_size;
  auto blocks_for = [&](int seq, int64_t tokens) { return lm.block_table(seq, tokens); };
  const int64_t cap = prompt_len + 2 * steps + 2;  // warm step, timed run, paired steps
  // Prefill: the whole prompt in one step, best of 2.
  auto prompt = random_ids(prompt_len, V, 1);
  double best = 1e30;
  for (int rep = 0; rep < 2; ++rep) {
    auto blocks = blocks_for(0, cap);
    models::SeqStep s;
    s.tokens = prompt;
    s.block_table = blocks;
    Stopwatch sw;
    step(lm, {&s, 1});
    best = std::min(best, sw.seconds());
  }
  f.prefill_tok_s = static_cast<double>(prompt_len) / best;
  // Decode at batch b: b sequences of prompt_len tokens already cached, `steps` steps.
  for (int b : {1, 8}) {
    std::vector<std::vector<int32_t>> tables;
    for (int i = 0; i < b; ++i) tables.push_back(blocks_for(i, cap));
    std::vector<int32_t> tok(static_cast<size_t>(b), 7);
    std::vector<models::SeqStep> st(static_cast<size_t>(b));
    // One warm step, then time.
    auto run_steps = [&](int n, int64_t kv0) {
      for (int k = 0; k < n; ++k)
        for (int i = 0; i < b; ++i) {
          st[static_cast<size_t>(i)].tokens = {&tok[static_cast<size_t>(i)], 1};
          st[static_cast<size_t>(i)].kv_before = static_cast<int32_t>(kv0 + k);
          st[static_cast<size_t>(i)].block_table = tables[static_cast<size_t>(i)];
        }
      for (int k = 0; k < n; ++k) {
        for (int i = 0; i < b; ++i)
          st[static_cast<size_t>(i)].kv_before = static_cast<int32_t>(kv0 + k);
        step(lm, st, graphs);
      }
    };
    run_steps(1, prompt_len);
    if (b == 1) {
      // Settle for a second first: right after loading the int8 model its first decode steps
      // ran up to 35 % slower than the same steps a minute later, in several runs. The cause is
      // not known (the weights were on huge pages by then), and one run was still slow after
      // this settling: the alternated ratio below is the robust figure.
      Stopwatch settle;
      while (settle.seconds() < 1.0) run_steps(1, prompt_len);
    }
    Stopwatch sw;
    run_steps(steps, prompt_len + 1);
    double s = sw.seconds();
    if (b == 1 && probe) {
      const double wbytes = static_cast<double>(lm.weight_bytes());
      const size_t window = std::min<size_t>(lm.weight_bytes(), probe->bytes());
      for (int k = 0; k < steps; ++k) {
        Stopwatch one;
        run_steps(1, prompt_len + 1 + steps + k);
        const double t_step = one.seconds();
        const double t_win = probe->read_next(window);
        f.b1_paired.push_back((wbytes / t_step) / (static_cast<double>(window) / t_win));
      }
    }
    double tps = static_cast<double>(steps * b) / s;
    if (b == 1) {
      f.decode_b1_tok_s = tps;
      f.b1_weight_gbs = static_cast<double>(lm.weight_bytes()) * steps / s / 1e9;
    } else {
      f.decode_b8_tok_s = tps;
    }
  }
  return f;
}

// The last-token logits of a fixed 64-token prompt (a host copy): what each weight format's pass
// is compared on.
std::vector<float> probe_logits(Lm& lm) {
  const std::vector<int32_t> ids = random_ids(64, lm.spec().vocab_size, 3);
  const Tensor t = lm.prefill({.ids = ids}, 64, lm.block_table(0, 64));
  return {t.data<float>(), t.data<float>() + t.numel()};
}

// b's logits against a's: relative L2 error, KL(softmax a || softmax b) in nats (in double), and
// whether the most likely token is the same.
void print_logit_drift(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0, ma = -1e300, mb = -1e300;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(a[i]) * a[i];
    ma = std::max(ma, double(a[i]));
    mb = std::max(mb, double(b[i]));
  }
  double za = 0, zb = 0;
  for (size_t i = 0; i < a.size(); ++i) za += std::exp(a[i] - ma), zb += std::exp(b[i] - mb);
  double kl = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double la = a[i] - ma - std::log(za), lb = b[i] - mb - std::log(zb);
    kl += std::exp(la) * (la - lb);
  }
  const auto top = [](const std::vector<float>& v) {
    return std::max_element(v.begin(), v.end()) - v.begin();
  };
  std::printf(
      "   first-token logits of a 64-token prompt against the first model's: relative error "
      "%.2e, KL %.2e nats, top-1 %s (random weights: a real checkpoint's figures differ)\n",
      std::sqrt(num / std::max(den, 1e-300)), kl, top(a) == top(b) ? "same" : "different");
}

// One batch-1 decode step of `lm` (its sequence 0 prefilled by run_lm), timed in seconds.
double decode_step_s(Lm& lm, engine::StepGraphs* g, int64_t prompt_len) {
  const std::vector<int32_t> table = lm.block_table(0, prompt_len + 1);
  int32_t tok = 7;
  models::SeqStep s;
  s.tokens = {&tok, 1};
  s.kv_before = static_cast<int32_t>(prompt_len);  // rewrites the same slot every time
  s.block_table = table;
  Stopwatch sw;
  step(lm, {&s, 1}, g);
  return sw.seconds();
}

// Decode steps of `a` and `b` alternated (a b, b a, ...; each through its step graphs where
// given): per pair, b's rate over a's. A change in the machine's load between the two halves of a
// run hits both sides of every pair.
std::vector<double> alternated_rate_ratios(Lm& a, engine::StepGraphs* ga, Lm& b,
                                           engine::StepGraphs* gb, int64_t prompt_len, int pairs) {
  std::vector<double> r;
  for (int k = 0; k < pairs; ++k) {
    double ta, tb;
    if (k % 2) {
      tb = decode_step_s(b, gb, prompt_len);
      ta = decode_step_s(a, ga, prompt_len);
    } else {
      ta = decode_step_s(a, ga, prompt_len);
      tb = decode_step_s(b, gb, prompt_len);
    }
    r.push_back(ta / tb);
  }
  return r;
}

int run_bench_model(Args& args) {
  std::string dir = args.require("model");
  int64_t prompt_len = args.get_int("prompt", 512, 1, 1 << 20);
  int steps = static_cast<int>(args.get_int("steps", 16, 1, 100000));
  bool do_int8 = !args.flag("no-int8");
  int image_side = static_cast<int>(args.get_int("image-side", 448, 0, 8192));
  // --image-size WxH: the encoder figure on a non-square image (e.g. 1920x1080).
  int image_w = image_side, image_h = image_side;
  if (const std::string size = args.get_or("image-size", ""); !size.empty()) {
    const size_t x = size.find('x');
    char* end = nullptr;
    const long w = x == std::string::npos ? 0 : std::strtol(size.c_str(), &end, 10);
    const long h = w > 0 ? std::strtol(size.c_str() + x + 1, &end, 10) : 0;
    if (w < 1 || h < 1 || w > 8192 || h > 8192 || (end && *end))
      throw InvalidArgument("--image-size must be WxH with sides in [1, 8192], got '" + size + "'");
    image_w = static_cast<int>(w);
    image_h = static_cast<int>(h);
  }
  const std::vector<double> audio_seconds =
      parse_audio_seconds(args.get_or("audio-seconds", "5,10,30"));
  std::string conc = args.get_or("concurrency", "");
  int64_t bw_mb = args.get_int("bandwidth-mb", 1024, 16, 1 << 20);
  const models::LoadOptions base = load_options(args);
  const engine::KvOptions kvo = kv_options(args);
  const ComputeOptions co = compute_options(args);
  const bool sensitivity = args.flag("encoder-sensitivity");
  args.finish();
  const std::unique_ptr<kernels::Backend> bep = make_backend(co);
  const kernels::Backend& be = *bep;
  const media::HostContext host(co.host);
  if (sensitivity) {
    bench_encoder_sensitivity(be, host, dir, base, kvo, image_side > 0 ? image_side : 448);
    return 0;
  }
  // The host memory probe runs on the CPU backend (the compute one, or one of its own).
  std::unique_ptr<kernels::CpuBackend> own_cpu;
  if (!be.device().is_host()) own_cpu = std::make_unique<kernels::CpuBackend>(co.backend);
  const kernels::CpuBackend& cpu = own_cpu ? *own_cpu : kernels::as_cpu(be);
  const Isa isa = cpu.isa();

  const bool device = !be.device().is_host();
  std::printf("== machine: %s, CPU matrix kernels %s\n", be.describe().c_str(),
              kernels::linear_isa(isa));
  // The compute device's own memory: the host's, or a GPU's (its HBM, read by a kernel).
  const double bw = be.measure_read_bandwidth_gbs(static_cast<size_t>(bw_mb) << 20);
  std::printf("   %s read bandwidth: %.1f GB/s (streaming %lld MiB, best of 5)\n",
              device ? "device memory" : "memory", bw, static_cast<long long>(bw_mb));
  // On the CPU, windows of the same probe read right after decode steps (paired under the same
  // load); a device has no such probe.
  std::unique_ptr<kernels::ReadStreamer> probe;
  if (!device)
    probe = std::make_unique<kernels::ReadStreamer>(cpu, static_cast<size_t>(bw_mb) << 20);

  // Passes: the weights as asked (default: as stored), then int8 with the chosen activations,
  // then, on the CPU where those were Q8 blocks, int8 strictly weight-only (float activations);
  // on a GPU (the activations' choice changes nothing there) FP8 E4M3 instead.
  std::vector<models::LoadOptions> passes{base};
  if (do_int8) {
    models::LoadOptions o = base;
    o.weight_format = kernels::WeightFormat::kInt8;
    passes.push_back(o);
    if (device) {
      o.weight_format = kernels::WeightFormat::kFp8;
      passes.push_back(o);
    } else if (o.int8_activations == kernels::Int8Activations::kQ8 &&
               kernels::int8_q8_available(isa)) {
      o.int8_activations = kernels::Int8Activations::kFloat;
      passes.push_back(o);
    }
  }
  double first_b1 = 0;
  std::vector<float> first_logits;
  std::unique_ptr<Lm> first;  // kept for the alternated comparison
  std::unique_ptr<engine::StepGraphs> first_graphs;
  for (size_t pass = 0; pass < passes.size(); ++pass) {
    const models::LoadOptions o = passes[pass];
    Stopwatch load;
    // run_lm's decode batch of 8: each sequence holds the prompt, a warm step, the timed steps
    // and the paired ones, in blocks of its own.
    const int64_t per_seq = prompt_len + 2 * steps + 2;
    const int64_t min_blocks = 8 * ((per_seq + kvo.block_size - 1) / kvo.block_size);
    std::unique_ptr<Lm> lm = load_lm(be, dir, o, kvo, min_blocks);
    double load_s = load.seconds();
    const kernels::KvCacheConfig kc = lm->kv().config();
    const double kv_mib = static_cast<double>(kc.num_blocks) * 2.0 * kc.n_layers * kc.block_size *
                          kc.n_kv_heads * kc.head_dim * dtype_size(kc.dtype) / (1 << 20);
    std::string what(kernels::weight_format_name(lm->weight_format()));
    if (lm->weight_format() == kernels::WeightFormat::kInt8 && device) {
      what += " (per output channel; x in bf16)";
    } else if (lm->weight_format() == kernels::WeightFormat::kFp8) {
      what += " E4M3 (per output channel; x in bf16)";
    } else if (lm->weight_format() == kernels::WeightFormat::kInt8) {
      const bool q8 = kernels::int8_q8_available(isa);
      what += o.int8_activations == kernels::Int8Activations::kQ8 && q8
                  ? " (decode on q8 blocks of x"
                  : " (decode weight-only, x float";
      what += o.int8_prefill == kernels::Int8Gemm::kQ8Row && q8 ? "; prefill on x per token)"
                                                                : "; prefill against bf16(x))";
    }
    std::printf(
        "== language model, %s weights (%.2f GB streamed per decode step, loaded in %.2f s)\n",
        what.c_str(), static_cast<double>(lm->weight_bytes()) / 1e9, load_s);
    if (pass == 0 && kv_mib > static_cast<double>(kvo.bytes >> 20) + 0.5)
      std::printf(
          "   KV cache %.0f MiB, more than --kv-mb %llu: decode at batch 8 holds 8 x %lld "
          "tokens\n",
          kv_mib, static_cast<unsigned long long>(kvo.bytes >> 20),
          static_cast<long long>(per_seq));
    const std::vector<float> logits = probe_logits(*lm);
    if (pass == 0)
      first_logits = logits;
    else
      print_logit_drift(first_logits, logits);
    // A GPU's decode steps (batch 1 and 8) as step graphs, CUDA graphs captured here.
    std::unique_ptr<engine::StepGraphs> graphs;
    if (device) {
      graphs = std::make_unique<engine::StepGraphs>(
          be, lm->runner(), lm->kv(),
          engine::StepGraphOptions{
              .max_rows = std::min(8, co.step_graph_rows),
              .max_context = static_cast<int32_t>(std::max<int64_t>(8192, per_seq)),
              .warm_tokens = static_cast<int32_t>(prompt_len),
              .warm_rows = 8});
      std::printf("   CUDA graphs: %s\n", graphs->capture().c_str());
    }
    auto f = run_lm(*lm, prompt_len, steps, probe.get(), graphs.get());
    // The linear layers' multiply-adds: two flops per weight per token (attention left out).
    const double weights = static_cast<double>(lm->weight_bytes()) /
                           static_cast<double>(kernels::weight_format_bytes(lm->weight_format()));
    std::printf("   prefill %lld tokens: %.1f tokens/s (%.2f TFLOP/s in the linear layers)\n",
                static_cast<long long>(prompt_len), f.prefill_tok_s,
                2 * weights * f.prefill_tok_s / 1e12);
    std::printf(
        "   decode batch 1: %.2f tokens/s = %.1f GB/s of weights = %.0f%% of the bandwidth above "
        "(MBU)\n",
        f.decode_b1_tok_s, f.b1_weight_gbs, 100 * f.b1_weight_gbs / bw);
    if (pass > 0) {
      std::printf("   decode batch 1 rate / the first model's: %.2fx\n",
                  f.decode_b1_tok_s / first_b1);
      const auto r = alternated_rate_ratios(*first, first_graphs.get(), *lm, graphs.get(),
                                            prompt_len, 2 * steps);
      std::printf(
          "     with their decode steps alternated: %.2fx median of %zu pairs (min %.2fx, "
          "max %.2fx)\n",
          median(r), r.size(), *std::min_element(r.begin(), r.end()),
          *std::max_element(r.begin(), r.end()));
    }
    if (!f.b1_paired.empty())
      std::printf(
          "   decode batch 1, each step paired with a bandwidth window read right after it:\n"
          "     weight rate / read rate = %.0f%% median of %zu pairs (min %.0f%%, max %.0f%%)\n",
          100 * median(f.b1_paired), f.b1_paired.size(),
          100 * *std::min_element(f.b1_paired.begin(), f.b1_paired.end()),
          100 * *std::max_element(f.b1_paired.begin(), f.b1_paired.end()));
    std::printf("   decode batch 8: %.2f tokens/s (%.2fx batch 1)\n", f.decode_b8_tok_s,
                f.decode_b8_tok_s / f.decode_b1_tok_s);
    if (graphs && graphs->stats().captured > 0) {
      const engine::StepGraphs::Stats gs = graphs->stats();
      const auto r = alternated_rate_ratios(*lm, nullptr, *lm, graphs.get(), prompt_len, 2 * steps);
      std::printf(
          "   decode steps replayed as graphs %lld (host %.1f us each: the model's host code and "
          "the launch), eager %lld; batch 1 as a graph / launched op by op, alternated: %.2fx "
          "median of %zu pairs (min %.2fx, max %.2fx)\n",
          static_cast<long long>(gs.replayed),
          gs.replayed
              ? 1e-3 * static_cast<double>(gs.replay_host_ns) / static_cast<double>(gs.replayed)
              : 0.0,
          static_cast<long long>(gs.eager), median(r), r.size(),
          *std::min_element(r.begin(), r.end()), *std::max_element(r.begin(), r.end()));
    }
    if (pass == 0) {
      first_b1 = f.decode_b1_tok_s;
      first = std::move(lm);
      first_graphs = std::move(graphs);
    }
  }

  if (image_w > 0 && first->spec().takes(models::Modality::kImage)) {
    // The first model's encoder on a synthetic image, preprocessed as a request's would be.
    const auto png = synthetic_png(image_w, image_h, 3);
    const media::MediaContext mctx = host.media_context();
    const models::PreparedMedia item =
        first->processor().preprocess(models::Modality::kImage, png, mctx);
    first->runner().encode(item);  // warm
    double best = 1e30;
    for (int i = 0; i < 2; ++i) {
      Stopwatch sw;
      first->runner().encode(item);
      be.synchronize();  // a device's queued work counts
      best = std::min(best, sw.seconds());
    }
    std::printf(
        "== vision encoder, %dx%d image (%lld patches, %lld tokens): %.1f ms (%.3f ms per "
        "patch), %.1f GFLOP/s\n",
        image_w, image_h, static_cast<long long>(item.encoder_cost),
        static_cast<long long>(item.n_tokens), best * 1e3,
        best * 1e3 / static_cast<double>(std::max<int64_t>(1, item.encoder_cost)),
        first->runner().encode_flops(item) / best / 1e9);
  }
  if (!audio_seconds.empty() && first->spec().takes(models::Modality::kAudio))
    bench_audio_encoder(be, host, first->model(), audio_seconds);
  first_graphs.reset();
  first.reset();  // the engine runs below get the memory back

  if (!conc.empty()) {
    std::vector<int> levels;
    for (size_t b = 0, e; b < conc.size(); b = e + 1) {
      e = conc.find(',', b);
      if (e == std::string::npos) e = conc.size();
      levels.push_back(std::stoi(conc.substr(b, e - b)));
    }
    engine::EngineConfig ec;
    ec.model_dir = dir;
    ec.model = base;
    ec.kv = kvo;
    set_compute(ec, co);
    ec.admission_control = false;
    ec.calibrate_encoder = false;  // no admission; the cold-turn figures stay cold
    auto eng = engine::Engine::create(ec);
    auto make = [&](int i) {
      engine::GenerateRequest g;
      g.messages.push_back(models::ChatMessage::text(
          "user", "Request " + std::to_string(i) + ": tell me about latency."));
      g.sampling.max_tokens = 32;
      g.sampling.ignore_eos = true;
      return g;
    };
    eng->submit(make(-1)).wait();  // warm
    std::printf("== engine throughput (32 generated tokens per request)\n");
    for (int c : levels) {
      Stopwatch sw;
      std::vector<engine::RequestHandle> hs;
      for (int i = 0; i < c; ++i) hs.push_back(eng->submit(make(i)));
      int64_t toks = 0;
      for (auto& h : hs) toks += static_cast<int64_t>(h.wait().tokens.size());
      std::printf("   %2d concurrent requests: %.1f generated tokens/s (%.2f s)\n", c,
                  static_cast<double>(toks) / sw.seconds(), sw.seconds());
    }
    if (device) {
      const engine::EngineStats st = eng->stats();
      std::printf("   %s\n", engine::step_graphs_text(st.step_graphs, st.step_graph_steps).c_str());
    }
    // Repeated image: the second turn of a conversation about the same image.
    auto img =
        synthetic_png(image_side > 0 ? image_side : 448, image_side > 0 ? image_side : 448, 5);
    auto turn = [&](bool second) {
      engine::GenerateRequest g;
      models::ChatMessage m;
      m.role = "user";
      m.content.push_back({models::ContentPart::Kind::kImage, ""});
      m.content.push_back({models::ContentPart::Kind::kText, "What is in this picture?"});
      g.messages.push_back(m);
      if (second) {
        g.messages.push_back(models::ChatMessage::text("assistant", "A colourful pattern."));
        g.messages.push_back(models::ChatMessage::text("user", "Which colour dominates?"));
      }
      g.add_image(img);
      g.sampling.max_tokens = 1;
      return g;
    };
    auto ttft = [](const engine::RequestResult& r) {
      return static_cast<double>(r.timeline.first(engine::Event::kFirstToken) -
                                 r.timeline.origin()) *
             1e-6;
    };
    auto first = eng->submit(turn(false)).wait();
    auto second = eng->submit(turn(true)).wait();
    engine::GenerateRequest cold = turn(true);
    cold.tenant = "cold";  // same second turn with no cache entries to reuse
    auto third = eng->submit(cold).wait();
    std::printf(
        "== repeated image: first turn TTFT %.1f ms; second turn %.1f ms with the caches (%lld of "
        "%lld prompt tokens "
        "reused) vs %.1f ms cold: %.1f ms saved\n",
        ttft(first), ttft(second), static_cast<long long>(second.cached_prompt_tokens),
        static_cast<long long>(second.prompt_tokens), ttft(third), ttft(third) - ttft(second));
  }
  return 0;
}

MMRT_COMMAND(
    "bench-model", "runtime speed on a checkpoint vs the machine's measured memory bandwidth",
    "usage: mmrt bench-model --model DIR [--prompt N] [--steps N] [--no-int8] [--image-side N]\n"
    "                        [--audio-seconds 5,10,30] [--concurrency 1,4,16] [options]\n\n"
    "Measures, in one run: memory read bandwidth (with --device cuda: the GPU's memory, read\n"
    "by a kernel); prefill tokens/s for an N-token prompt (default 512) and the linear layers'\n"
    "TFLOP/s; decode tokens/s at batch 1 and 8 with the weight bytes streamed per second as a\n"
    "fraction of that bandwidth (MBU); every step waited for, as a sampled step is; the\n"
    "same with int8 weights (skip with --no-int8), on the CPU both with q8 activations and\n"
    "strictly weight-only where it has the q8 kernel, on a GPU then FP8 E4M3 weights; the\n"
    "vision tower on an N x N image (default 448, 0 to skip) with GFLOP/s; on a model\n"
    "that takes audio, for synthetic clips of each length in --audio-seconds (default\n"
    "5,10,30; 0 to skip): decode + resample + log-mel time (one thread), the audio encoder's\n"
    "time with GFLOP/s and tokens, and the longest clip's encoder time over the shortest's\n"
    "(warm-up once, then the median of 3 to 15 repetitions); and with\n"
    "--concurrency, engine throughput at those concurrency levels plus the time a repeated\n"
    "image saves on a second conversation turn.\n\n"
    "  --image-size WxH        the vision encoder on a WxH image instead (e.g. 1920x1080)\n"
    "  --bandwidth-mb N        buffer streamed by the bandwidth probe (default "
    "1024)\n"
    "  --encoder-sensitivity   instead: each encoder block alone in int8, then the blocks\n"
    "                          --encoder-keep-last leaves, against the encoder in bf16: the\n"
    "                          relative error of its output on an --image-side image and the\n"
    "                          KL of the first token after a prompt with it (one load per\n"
    "                          block: minutes on a 2B model), to choose --encoder-keep-last\n"
    "                          for a checkpoint\n" MMRT_MODEL_OPTIONS_HELP,
    {"no-int8", "map-weights", "encoder-sensitivity", "batch-invariant"}, run_bench_model);

}  // namespace
}  // namespace mmrt::cli
