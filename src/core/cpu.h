// CPU feature detection, read once; used by every run-time kernel dispatcher.
#pragma once

namespace mmrt {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512bf16 = false, avx512vnni = false, avx_vnni = false;
  bool has_avx2() const { return avx2 && fma && f16c; }
  bool has_avx512() const { return has_avx2() && avx512f && avx512bw && avx512vl && avx512dq; }
  bool has_avx512bf16() const { return has_avx512() && avx512bf16; }
};

const CpuFeatures& cpu_features();
int cpu_count();  // online hardware threads

}  // namespace mmrt
