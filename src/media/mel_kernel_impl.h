// The log-mel kernel, written once over a GCC vector of doubles (one frame per lane) and
// instantiated by each ISA file (mel_kernel.cpp: 2 lanes, SSE2; mel_kernel_avx2.cpp: 4;
// mel_kernel_avx512.cpp: 8). Everything here has internal linkage, so code compiled with one
// file's ISA flags is never linked into another's. Included only by those files.
//
// Per block of lanes frames: window, the real FFT of n_fft points as a complex FFT of n_fft / 2
// points (Stockham stages, radix 8/4/2/3/5 butterflies, generic ones for larger primes) and the
// split into n_fft / 2 + 1 bins, |X|^2, the sparse mel filters, max(., 1e-10), log10. All in
// double precision.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

#include "media/mel_internal.h"

namespace mmrt::media::detail {
namespace {

template <class V>
inline V splat(double x) {
  return V{} + x;
}

// (r + i im) *= (wr + i wi)
template <class V>
inline void cmul(V& r, V& im, double wr, double wi) {
  const V t = r * wr - im * wi;
  im = r * wi + im * wr;
  r = t;
}

// One Stockham stage: y[q + s (p j + k)] = W_l^(j k) sum_r x[q + s (j + r m)] W_p^(r k).
template <class V>
struct Stage {
  const V *xr, *xi;
  V *yr, *yi;
  const double *twr, *twi;  // [m][p - 1]
  int64_t m, s;
};

template <class V>
void radix2(const Stage<V>& g) {
  const int64_t step = g.s * g.m;
  for (int64_t j = 0; j < g.m; ++j) {
    const double wr = g.twr[j], wi = g.twi[j];
    for (int64_t q = 0; q < g.s; ++q) {
      const int64_t i = q + g.s * j, o = q + 2 * g.s * j;
      const V ar = g.xr[i], ai = g.xi[i], br = g.xr[i + step], bi = g.xi[i + step];
      g.yr[o] = ar + br;
      g.yi[o] = ai + bi;
      V dr = ar - br, di = ai - bi;
      if (j > 0) cmul(dr, di, wr, wi);
      g.yr[o + g.s] = dr;
      g.yi[o + g.s] = di;
    }
  }
}

template <class V>
void radix3(const Stage<V>& g) {
  constexpr double kS = 0.86602540378443864676;  // sin(2 pi / 3)
  const int64_t step = g.s * g.m;
  for (int64_t j = 0; j < g.m; ++j) {
    const double* wr = g.twr + 2 * j;
    const double* wi = g.twi + 2 * j;
    for (int64_t q = 0; q < g.s; ++q) {
      const int64_t i = q + g.s * j, o = q + 3 * g.s * j;
      const V a0r = g.xr[i], a0i = g.xi[i];
      const V a1r = g.xr[i + step], a1i = g.xi[i + step];
      const V a2r = g.xr[i + 2 * step], a2i = g.xi[i + 2 * step];
      const V t1r = a1r + a2r, t1i = a1i + a2i;
      const V t2r = a0r - 0.5 * t1r, t2i = a0i - 0.5 * t1i;
      const V t3r = kS * (a1r - a2r), t3i = kS * (a1i - a2i);
      g.yr[o] = a0r + t1r;
      g.yi[o] = a0i + t1i;
      V b1r = t2r + t3i, b1i = t2i - t3r, b2r = t2r - t3i, b2i = t2i + t3r;
      if (j > 0) {
        cmul(b1r, b1i, wr[0], wi[0]);
        cmul(b2r, b2i, wr[1], wi[1]);
      }
      g.yr[o + g.s] = b1r;
      g.yi[o + g.s] = b1i;
      g.yr[o + 2 * g.s] = b2r;
      g.yi[o + 2 * g.s] = b2i;
    }
  }
}

template <class V>
void radix4(const Stage<V>& g) {
  const int64_t step = g.s * g.m;
  for (int64_t j = 0; j < g.m; ++j) {
    const double* wr = g.twr + 3 * j;
    const double* wi = g.twi + 3 * j;
    for (int64_t q = 0; q < g.s; ++q) {
      const int64_t i = q + g.s * j, o = q + 4 * g.s * j;
      const V a0r = g.xr[i], a0i = g.xi[i];
      const V a1r = g.xr[i + step], a1i = g.xi[i + step];
      const V a2r = g.xr[i + 2 * step], a2i = g.xi[i + 2 * step];
      const V a3r = g.xr[i + 3 * step], a3i = g.xi[i + 3 * step];
      const V t0r = a0r + a2r, t0i = a0i + a2i, t1r = a0r - a2r, t1i = a0i - a2i;
      const V t2r = a1r + a3r, t2i = a1i + a3i, t3r = a1r - a3r, t3i = a1i - a3i;
      g.yr[o] = t0r + t2r;
      g.yi[o] = t0i + t2i;
      V b1r = t1r + t3i, b1i = t1i - t3r;  // t1 - i t3
      V b2r = t0r - t2r, b2i = t0i - t2i;
      V b3r = t1r - t3i, b3i = t1i + t3r;  // t1 + i t3
      if (j > 0) {
        cmul(b1r, b1i, wr[0], wi[0]);
        cmul(b2r, b2i, wr[1], wi[1]);
        cmul(b3r, b3i, wr[2], wi[2]);
      }
      g.yr[o + g.s] = b1r;
      g.yi[o + g.s] = b1i;
      g.yr[o + 2 * g.s] = b2r;
      g.yi[o + 2 * g.s] = b2i;
      g.yr[o + 3 * g.s] = b3r;
      g.yi[o + 3 * g.s] = b3i;
    }
  }
}

template <class V>
void radix5(const Stage<V>& g) {
  constexpr double kC1 = 0.30901699437494742410, kC2 = -0.80901699437494742410;  // cos 2pi/5, 4pi/5
  constexpr double kS1 = 0.95105651629515357212, kS2 = 0.58778525229247312917;   // sin 2pi/5, 4pi/5
  const int64_t step = g.s * g.m;
  for (int64_t j = 0; j < g.m; ++j) {
    const double* wr = g.twr + 4 * j;
    const double* wi = g.twi + 4 * j;
    for (int64_t q = 0; q < g.s; ++q) {
      const int64_t i = q + g.s * j, o = q + 5 * g.s * j;
      const V a0r = g.xr[i], a0i = g.xi[i];
      const V a1r = g.xr[i + step], a1i = g.xi[i + step];
      const V a2r = g.xr[i + 2 * step], a2i = g.xi[i + 2 * step];
      const V a3r = g.xr[i + 3 * step], a3i = g.xi[i + 3 * step];
      const V a4r = g.xr[i + 4 * step], a4i = g.xi[i + 4 * step];
      const V t1r = a1r + a4r, t1i = a1i + a4i, t2r = a2r + a3r, t2i = a2i + a3i;
      const V t3r = a1r - a4r, t3i = a1i - a4i, t4r = a2r - a3r, t4i = a2i - a3i;
      g.yr[o] = a0r + t1r + t2r;
      g.yi[o] = a0i + t1i + t2i;
      const V u1r = a0r + kC1 * t1r + kC2 * t2r, u1i = a0i + kC1 * t1i + kC2 * t2i;
      const V u2r = a0r + kC2 * t1r + kC1 * t2r, u2i = a0i + kC2 * t1i + kC1 * t2i;
      const V v1r = kS1 * t3r + kS2 * t4r, v1i = kS1 * t3i + kS2 * t4i;
      const V v2r = kS2 * t3r - kS1 * t4r, v2i = kS2 * t3i - kS1 * t4i;
      V b1r = u1r + v1i, b1i = u1i - v1r, b4r = u1r - v1i, b4i = u1i + v1r;  // u1 -/+ i v1
      V b2r = u2r + v2i, b2i = u2i - v2r, b3r = u2r - v2i, b3i = u2i + v2r;  // u2 -/+ i v2
      if (j > 0) {
        cmul(b1r, b1i, wr[0], wi[0]);
        cmul(b2r, b2i, wr[1], wi[1]);
        cmul(b3r, b3i, wr[2], wi[2]);
        cmul(b4r, b4i, wr[3], wi[3]);
      }
      g.yr[o + g.s] = b1r;
      g.yi[o + g.s] = b1i;
      g.yr[o + 2 * g.s] = b2r;
      g.yi[o + 2 * g.s] = b2i;
      g.yr[o + 3 * g.s] = b3r;
      g.yi[o + 3 * g.s] = b3i;
      g.yr[o + 4 * g.s] = b4r;
      g.yi[o + 4 * g.s] = b4i;
    }
  }
}

template <class V>
void radix8(const Stage<V>& g) {
  constexpr double kH = 0.70710678118654752440;  // 1 / sqrt(2)
  const int64_t step = g.s * g.m;
  for (int64_t j = 0; j < g.m; ++j) {
    const double* wr = g.twr + 7 * j;
    const double* wi = g.twi + 7 * j;
    for (int64_t q = 0; q < g.s; ++q) {
      const int64_t i = q + g.s * j, o = q + 8 * g.s * j;
      V ur[4], ui[4], vr[4], vi[4];
      // Radix 2 across (a_r, a_r+4), the odd half times W_8^r, then two 4-point DFTs.
      for (int r = 0; r < 4; ++r) {
        const V ar = g.xr[i + r * step], ai = g.xi[i + r * step];
        const V br = g.xr[i + (r + 4) * step], bi = g.xi[i + (r + 4) * step];
        ur[r] = ar + br, ui[r] = ai + bi, vr[r] = ar - br, vi[r] = ai - bi;
      }
      {
        const V r1 = vr[1], i1 = vi[1], r3 = vr[3], i3 = vi[3];
        vr[1] = kH * (r1 + i1), vi[1] = kH * (i1 - r1);  // * (1 - i) / sqrt 2
        const V r2 = vr[2];
        vr[2] = vi[2], vi[2] = -r2;                       // * -i
        vr[3] = kH * (i3 - r3), vi[3] = -kH * (r3 + i3);  // * (-1 - i) / sqrt 2
      }
      V br[8], bi[8];
      for (int h = 0; h < 2; ++h) {
        const V* xr = h == 0 ? ur : vr;
        const V* xi = h == 0 ? ui : vi;
        const V t0r = xr[0] + xr[2], t0i = xi[0] + xi[2], t1r = xr[0] - xr[2], t1i = xi[0] - xi[2];
        const V t2r = xr[1] + xr[3], t2i = xi[1] + xi[3], t3r = xr[1] - xr[3], t3i = xi[1] - xi[3];
        br[h] = t0r + t2r, bi[h] = t0i + t2i;
        br[h + 2] = t1r + t3i, bi[h + 2] = t1i - t3r;
        br[h + 4] = t0r - t2r, bi[h + 4] = t0i - t2i;
        br[h + 6] = t1r - t3i, bi[h + 6] = t1i + t3r;
      }
      g.yr[o] = br[0];
      g.yi[o] = bi[0];
      for (int k = 1; k < 8; ++k) {
        if (j > 0) cmul(br[k], bi[k], wr[k - 1], wi[k - 1]);
        g.yr[o + k * g.s] = br[k];
        g.yi[o + k * g.s] = bi[k];
      }
    }
  }
}

// Any radix p: a direct p-point DFT with the roots W_p^t, then the twiddles. ar/ai: p scratch.
template <class V>
void radix_generic(const Stage<V>& g, int64_t p, const double* rr, const double* ri, V* ar, V* ai) {
  const int64_t step = g.s * g.m;
  for (int64_t j = 0; j < g.m; ++j) {
    const double* wr = g.twr + (p - 1) * j;
    const double* wi = g.twi + (p - 1) * j;
    for (int64_t q = 0; q < g.s; ++q) {
      const int64_t i = q + g.s * j, o = q + p * g.s * j;
      for (int64_t r = 0; r < p; ++r) ar[r] = g.xr[i + r * step], ai[r] = g.xi[i + r * step];
      for (int64_t k = 0; k < p; ++k) {
        V br = V{}, bi = V{};
        int64_t t = 0;  // r * k mod p
        for (int64_t r = 0; r < p; ++r) {
          br += ar[r] * rr[t] - ai[r] * ri[t];
          bi += ar[r] * ri[t] + ai[r] * rr[t];
          t += k;
          if (t >= p) t -= p;
        }
        if (k > 0) cmul(br, bi, wr[k - 1], wi[k - 1]);
        g.yr[o + k * g.s] = br;
        g.yi[o + k * g.s] = bi;
      }
    }
  }
}

// In-register transpose of W rows of W lanes: log2(W) stages, stage B swapping the off-diagonal
// B x B blocks (element (i, j) with bit B of i != bit B of j trades with (i ^ B, j ^ B)).
template <class VU, int W, int B, bool Hi, int... J>
constexpr VU block_mask(std::integer_sequence<int, J...>) {
  return VU{static_cast<uint64_t>(Hi ? ((J & B) ? W + J : J + B) : ((J & B) ? W + J - B : J))...};
}

// Lane j of the result is a[m[j]] for m[j] < W, else b[m[j] - W]: GCC's two-vector
// __builtin_shuffle; clang (the fuzz build) has no such builtin, and gets the lane loop.
template <class V, class VU>
inline V shuffle2(V a, V b, VU m) {
#if defined(__clang__)
  constexpr int W = sizeof(V) / sizeof(double);
  V r = a;
  for (int j = 0; j < W; ++j) {
    const int k = static_cast<int>(m[j]);
    r[j] = k < W ? a[k] : b[k - W];
  }
  return r;
#else
  return __builtin_shuffle(a, b, m);
#endif
}

template <class V, class VU, int B>
inline void transpose(V* r) {
  constexpr int W = sizeof(V) / sizeof(double);
  constexpr VU lo = block_mask<VU, W, B, false>(std::make_integer_sequence<int, W>{});
  constexpr VU hi = block_mask<VU, W, B, true>(std::make_integer_sequence<int, W>{});
  for (int i = 0; i < W; ++i)
    if (!(i & B)) {
      const V a = r[i], b = r[i + B];
      r[i] = shuffle2<V, VU>(a, b, lo);
      r[i + B] = shuffle2<V, VU>(a, b, hi);
    }
  if constexpr (B > 1) transpose<V, VU, B / 2>(r);
}

// The windowed samples of frames t0 .. t0 + W - 1 into z = xr + i xi (one frame per lane):
// W x W tiles loaded as float vectors, widened, transposed, times the window.
template <class V, class VU, class VF>
inline void load_frames(const MelPlan& plan, const float* const* frames, int64_t t0, V* xr, V* xi) {
  constexpr int W = sizeof(V) / sizeof(double);
  const double* win = plan.window.data();
  const int64_t n_fft = plan.n_fft, tiled = n_fft / W * W;
  for (int64_t n0 = 0; n0 < tiled; n0 += W) {
    V r[W];
    for (int l = 0; l < W; ++l) {
      VF f;
      std::memcpy(&f, frames[t0 + l] + n0, sizeof f);
      r[l] = __builtin_convertvector(f, V);
    }
    if constexpr (W > 1) transpose<V, VU, W / 2>(r);
    for (int k = 0; k < W; ++k) {  // n0 is even (W is)
      const int64_t n = n0 + k;
      (k % 2 == 0 ? xr : xi)[n / 2] = r[k] * win[n];
    }
  }
  for (int64_t n = tiled; n < n_fft; ++n)
    for (int l = 0; l < W; ++l)
      (n % 2 == 0 ? xr : xi)[n / 2][l] = static_cast<double>(frames[t0 + l][n]) * win[n];
}

// log10(x) for positive normal x, to ~1e-15 relative: x = 2^e m with m in [sqrt(1/2), sqrt(2)),
// ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.172, by its series to s^17 (the next
// term is below 1e-15 of the result).
template <class V, class VU>
inline V log10_positive(V x) {
  const VU bits = std::bit_cast<VU>(x);
  const V m0 = std::bit_cast<V>((bits & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull);
  // The biased exponent as a double: placed in the mantissa of 2^52, which is then subtracted.
  V e = std::bit_cast<V>((bits >> 52) | 0x4330000000000000ull) -
        splat<V>(4503599627370496.0 + 1023.0);
  const auto big = m0 > splat<V>(1.41421356237309504880);
  const V m = big ? m0 * 0.5 : m0;
  e = big ? e + 1.0 : e;
  const V s = (m - 1.0) / (m + 1.0);
  const V z = s * s;
  V p = splat<V>(1.0 / 17);
  p = p * z + 1.0 / 15;
  p = p * z + 1.0 / 13;
  p = p * z + 1.0 / 11;
  p = p * z + 1.0 / 9;
  p = p * z + 1.0 / 7;
  p = p * z + 1.0 / 5;
  p = p * z + 1.0 / 3;
  p = p * z + 1.0;
  constexpr double kLog10_2 = 0.30102999566398119521, kLog10_E = 0.43429448190325182765;
  return e * kLog10_2 + (2.0 * s * p) * kLog10_E;
}

template <class V, class VU, class VF>
double log_mel_frames(const MelPlan& plan, const float* const* frames, int64_t n_frames,
                      double* out) {
  constexpr int64_t W = sizeof(V) / sizeof(double);
  const int64_t M = plan.n_fft / 2, n_bins = plan.n_bins;
  const int64_t gen = plan.fft.max_generic_radix;
  std::unique_ptr<V[]> buf(new V[4 * M + n_bins + 2 * gen]);
  V *xr = buf.get(), *xi = xr + M, *yr = xi + M, *yi = yr + M, *pw = yi + M;
  V *gr = pw + n_bins, *gi = gr + gen;
  V vmax = splat<V>(-1e300);
  double tail_max = -1e300;
  for (int64_t t0 = 0; t0 < n_frames; t0 += W) {
    // z[n] = w[2n] x[2n] + i w[2n+1] x[2n+1], one frame per lane.
    load_frames<V, VU, VF>(plan, frames, t0, xr, xi);
    V *ar = xr, *ai = xi, *br = yr, *bi = yi;
    for (const FftStage& st : plan.fft.stages) {
      const Stage<V> g{ar,
                       ai,
                       br,
                       bi,
                       plan.fft.tw_re.data() + st.tw_offset,
                       plan.fft.tw_im.data() + st.tw_offset,
                       st.m,
                       st.s};
      switch (st.p) {
        case 2:
          radix2(g);
          break;
        case 3:
          radix3(g);
          break;
        case 4:
          radix4(g);
          break;
        case 5:
          radix5(g);
          break;
        case 8:
          radix8(g);
          break;
        default:
          radix_generic(g, st.p, plan.fft.root_re.data() + st.root_offset,
                        plan.fft.root_im.data() + st.root_offset, gr, gi);
      }
      std::swap(ar, br);
      std::swap(ai, bi);
    }
    // Z = ar + i ai. X[0] and X[M] are real; in between X[k] = E[k] + w_k O[k] with
    // E = (Z[k] + conj Z[M-k]) / 2 and O = (Z[k] - conj Z[M-k]) / 2i.
    {
      const V s0 = ar[0] + ai[0], sM = ar[0] - ai[0];
      pw[0] = s0 * s0;
      pw[M] = sM * sM;
    }
    for (int64_t k = 1; k < M; ++k) {
      const V zr = ar[k], zi = ai[k], cr = ar[M - k], ci = ai[M - k];
      const V er = 0.5 * (zr + cr), ei = 0.5 * (zi - ci);
      const V orr = 0.5 * (zi + ci), oi = 0.5 * (cr - zr);
      const double c = plan.split_re[k], d = plan.split_im[k];
      const V xr2 = er + c * orr - d * oi, xi2 = ei + c * oi + d * orr;
      pw[k] = xr2 * xr2 + xi2 * xi2;
    }
    const int64_t valid = n_frames - t0 < W ? n_frames - t0 : W;
    for (int64_t j = 0; j < plan.n_mels; ++j) {
      const double* w = plan.weights.data() + plan.weight_offset[j];
      const V* p = pw + plan.bin_begin[j];
      V acc = V{};
      for (int32_t b = 0; b < plan.bin_count[j]; ++b) acc += p[b] * w[b];
      const V floor = splat<V>(1e-10);
      acc = acc < floor ? floor : acc;
      const V lg = log10_positive<V, VU>(acc);
      double* o = out + j * n_frames + t0;
      if (valid == W) {
        std::memcpy(o, &lg, sizeof lg);
        vmax = lg > vmax ? lg : vmax;
      } else {
        for (int64_t l = 0; l < valid; ++l) {
          o[l] = lg[l];
          tail_max = lg[l] > tail_max ? lg[l] : tail_max;
        }
      }
    }
  }
  for (int64_t l = 0; l < W; ++l) tail_max = vmax[l] > tail_max ? vmax[l] : tail_max;
  return tail_max;
}

// The per-item clamp and scale, (max(y, floor) + 4) / 4 (written as the exact * 0.25), cast to
// float once.
template <class V, class VF>
void finish(const double* y, int64_t n, double floor, float* out) {
  constexpr int64_t W = sizeof(V) / sizeof(double);
  const V f = splat<V>(floor);
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    V v;
    std::memcpy(&v, y + i, sizeof v);
    v = ((v < f ? f : v) + 4.0) * 0.25;
    const VF r = __builtin_convertvector(v, VF);
    std::memcpy(out + i, &r, sizeof r);
  }
  for (; i < n; ++i) out[i] = static_cast<float>(((y[i] < floor ? floor : y[i]) + 4.0) * 0.25);
}

}  // namespace
}  // namespace mmrt::media::detail
