"""Whisper log-mel features of a 30 s clip, one thread: mmrt against the HF numpy float64 path
(the frame loop transformers' audio_utils.spectrogram runs, and the same numbers vectorised with
stride tricks) and torchaudio 0.13's MelSpectrogram (float32), with the ratios.

    /usr/bin/python3 bench/mel_compare.py --bench build/release/bench/bench_audio [--repeat 5]

The numpy and torch implementations are tests/reference/whisper_mel_ref.py's (the ones the
reference tests check mmrt against). Times are CPU times of the process (the checkout's machine
is shared, so wall time is noisy; every implementation here runs on one thread, where the two
agree on an idle machine): the best of --repeat calls for Python, the best of 5 Google
Benchmark repetitions of bench_audio's BM_Mel per kernel variant for mmrt.
"""

import os

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import whisper_mel_ref as ref  # noqa: E402


def best_of(fn, repeat):
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times) * 1e3


def mmrt_times(bench, n_mels_list):
    out = subprocess.run([bench, "--benchmark_filter=BM_Mel/", "--benchmark_format=json",
                          "--benchmark_min_time=0.3", "--benchmark_repetitions=5"],
                         check=True, capture_output=True, text=True).stdout
    rows = [b for b in json.loads(out)["benchmarks"]
            if b.get("run_type") == "iteration" and not b.get("error_occurred")]
    res = {}
    for n_mels in n_mels_list:
        for isa in ("avx512", "avx2", "portable"):
            r = [b for b in rows if b["run_name"] == f"BM_Mel/{n_mels}_{isa}"]
            if r:
                assert all(b["time_unit"] == "ms" for b in r)
                res.setdefault(n_mels, []).append((isa, min(b["cpu_time"] for b in r)))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True, help="path to build/release/bench/bench_audio")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    import torch
    import torchaudio

    torch.set_num_threads(1)
    x = ref.tones_and_noise(30.0, 1)
    mm = mmrt_times(args.bench, (80, 128))
    print(f"30 s clip at 16 kHz, n_fft 400, hop 160, one thread, CPU time; best of {args.repeat} "
          f"(numpy {np.__version__}, torch {torch.__version__}, torchaudio {torchaudio.__version__})")
    for n_mels in (80, 128):
        filters = ref.slaney_filters(n_mels)
        transform = torchaudio.transforms.MelSpectrogram(
            ref.RATE, n_fft=400, hop_length=160, n_mels=n_mels, f_min=0.0, f_max=8000.0, power=2.0,
            center=True, pad_mode="reflect", norm="slaney", mel_scale="slaney")
        t_loop = best_of(lambda: ref.hf_features(x, n_mels), args.repeat)
        t_vec = best_of(lambda: ref.hf_features_vectorised(x, n_mels, filters=filters), args.repeat)
        t_ta = best_of(lambda: ref.ta_features(x, n_mels, transform=transform), args.repeat)
        print(f"\n{n_mels} mels:")
        print(f"  HF numpy float64, frame loop (audio_utils.spectrogram) {t_loop:8.2f} ms")
        print(f"  HF numpy float64, vectorised (stride tricks)          {t_vec:8.2f} ms")
        print(f"  torchaudio MelSpectrogram float32                      {t_ta:8.2f} ms")
        for isa, t in mm.get(n_mels, []):
            print(f"  mmrt MelExtractor::compute [{isa:8s}]                {t:8.2f} ms   "
                  f"x{t_loop / t:6.1f} vs frame loop, x{t_vec / t:5.1f} vs vectorised numpy, "
                  f"x{t_ta / t:5.1f} vs torchaudio")


if __name__ == "__main__":
    main()
