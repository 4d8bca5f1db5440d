"""Writes the voice-activity evaluation set: real (synthesised and recorded) speech joined by
silences of known length, with sample-exact ground truth.

    /usr/bin/python3 tests/reference/vad_speech.py --out DIR

Utterances: sentences spoken by espeak-ng (22050 Hz, resampled to 16 kHz with
scipy.signal.resample_poly(x, 160, 441)) and the spoken alsa-utils clips
/usr/share/sounds/alsa/{Front,Rear,Side}_*.wav (48 kHz, resample_poly(x, 1, 3)). Each utterance
is trimmed to where its speech actually starts and ends: the first and last sample whose
centred 5 ms RMS envelope reaches -40 dB relative to the utterance's loudest 5 ms. Every
utterance gets a random gain in [-10, 0] dB, and the utterances of a stream are joined with
silences drawn uniformly from [500, 1500] ms, with 1000 ms of silence before the first and
after the last (a stream starts and ends in silence; a VAD whose min_silence_ms is shorter than
the smallest gap must find every boundary).

Two disjoint sets: "tune" (the defaults were chosen on it) and "heldout" (different sentences,
voices, speaking rates, alsa clips, gain/gap/noise seeds), never used for tuning.

For each stream, DIR holds:
  <set>_<k>_clean.npy   float32 [n] the speech and digital silence
  <set>_<k>_white.npy   float32 [n] white Gaussian noise, unit RMS
  <set>_<k>_pink.npy    float32 [n] pink (1/f power) Gaussian noise, unit RMS
and DIR/vad_manifest.json lists, per stream, those files, the ground-truth segments
[[begin, end), ...] in samples at 16 kHz, what each one is (sources), and speech_power: the mean square of the clean signal
over the truth segments. The test mixes clean + noise * sqrt(speech_power / 10^(snr / 10)),
so "SNR" is the speech power over the noise power.
"""

import argparse
import json
import os
import subprocess
import tempfile

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

RATE = 16000
TUNE_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "She sells sea shells by the sea shore.",
    "Six spoons of fresh snow peas and five thick slabs of blue cheese.",
    "What time does the next train to the airport leave?",
    "A large size in stockings is hard to sell.",
    "The birch canoe slid on the smooth planks.",
    "Glue the sheet to the dark blue background.",
    "It is easy to tell the depth of a well.",
    "Help the woman get back to her feet.",
    "Feel the heat of the weak dying flame.",
    "Open the crate but do not break the glass.",
    "The colt reared and threw the tall rider.",
    "Bail the boat to stop it from sinking.",
    "Press the pants and sew a button on the vest.",
    "The frosty air passed through the coat.",
    "Add the sum to the product of these three.",
    "Farewell, and see you at the harbour tomorrow.",
]
HELDOUT_SENTENCES = [
    "These days a chicken leg is a rare dish.",
    "Rice is often served in round bowls.",
    "The juice of lemons makes fine punch.",
    "The box was thrown beside the parked truck.",
    "Four hours of steady work faced us.",
    "Thieves who rob friends deserve jail.",
    "Hoist the load to your left shoulder.",
    "Sometimes a small fish will leap over the fence of the pond.",
    "Jerk the rope and the bell rings weakly.",
    "Should we start the meeting now or wait for everyone?",
    "Kick the ball straight and follow through.",
    "The sky that morning was clear and bright blue.",
    "A pot of tea helps to pass the evening.",
    "Smoky fires lack flame and heat.",
    "The soft cushion broke the man's fall.",
    "Fasten two pins on each side.",
    "Which of these shoes fits you best, the red or the black?",
    "Steam hissed from the broken valve.",
]
SETS = {
    # voices x speaking rates (words per minute), alsa clips, seed
    "tune": dict(sentences=TUNE_SENTENCES, voices=[("en-us", 165), ("en-gb-scotland", 150),
                                                    ("en-us+f3", 180)],
                 alsa=["Front_Center", "Front_Left", "Front_Right", "Rear_Center"], seed=1000),
    "heldout": dict(sentences=HELDOUT_SENTENCES, voices=[("en-gb", 170), ("en-029", 155),
                                                          ("en-gb-x-rp+f2", 185)],
                    alsa=["Rear_Left", "Rear_Right", "Side_Left", "Side_Right"], seed=2000),
}
STREAM_UTTERANCES = 8


def trim(x):
    """The [begin, end) of x's speech: centred 5 ms RMS envelope >= peak - 40 dB."""
    w = RATE // 200
    p = np.convolve(x.astype(np.float64) ** 2, np.ones(w) / w, mode="same")
    active = np.nonzero(p >= p.max() * 1e-4)[0]
    return int(active[0]), int(active[-1]) + 1


def espeak(text, voice, rate, tmp):
    path = os.path.join(tmp, "u.wav")
    subprocess.run(["espeak-ng", "-v", voice, "-s", str(rate), "-w", path, text], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    x, sr = sf.read(path, dtype="float64")
    assert sr == 22050, sr
    return resample_poly(x, 160, 441)


def alsa(name):
    x, sr = sf.read("/usr/share/sounds/alsa/%s.wav" % name, dtype="float64")
    assert sr == 48000, sr
    if x.ndim > 1:
        x = x.mean(axis=1)
    return resample_poly(x, 1, 3)


def pink(n, rng):
    """Gaussian noise with 1/f power (amplitude 1/sqrt(f) in the FFT), unit RMS."""
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.arange(spec.size, dtype=np.float64)
    f[0] = 1.0
    spec /= np.sqrt(f)
    spec[0] = 0.0
    y = np.fft.irfft(spec, n)
    return y / np.sqrt(np.mean(y**2))


def make_set(name, spec, out, tmp):
    rng = np.random.default_rng(spec["seed"])
    utts, labels = [], []
    for k, text in enumerate(spec["sentences"]):
        for voice, rate in spec["voices"]:
            utts.append(espeak(text, voice, rate, tmp))
            labels.append("espeak %s %d: sentence %d" % (voice, rate, k))
    utts += [alsa(a) for a in spec["alsa"]]
    labels += ["alsa " + a for a in spec["alsa"]]
    order = rng.permutation(len(utts))
    streams = []
    for k in range(0, len(order), STREAM_UTTERANCES):
        parts, truth, sources, pos = [np.zeros(RATE)], [], [], RATE
        for i in order[k:k + STREAM_UTTERANCES]:
            b, e = trim(utts[i])
            u = utts[i][b:e] * 10 ** (rng.uniform(-10, 0) / 20)
            if truth:
                gap = int(rng.uniform(0.5, 1.5) * RATE)
                parts.append(np.zeros(gap))
                pos += gap
            parts.append(u)
            truth.append([pos, pos + len(u)])
            sources.append(labels[i])
            pos += len(u)
        parts.append(np.zeros(RATE))
        clean = np.concatenate(parts)
        power = float(np.mean(np.concatenate([clean[b:e] for b, e in truth]) ** 2))
        idx = len(streams)
        files = {}
        for kind, sig in (("clean", clean), ("white", rng.standard_normal(clean.size)),
                          ("pink", pink(clean.size, rng))):
            files[kind] = "%s_%d_%s.npy" % (name, idx, kind)
            np.save(os.path.join(out, files[kind]), sig.astype(np.float32))
        streams.append(dict(files=files, truth=truth, sources=sources, speech_power=power,
                            samples=int(clean.size)))
    return streams


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    manifest = dict(sample_rate=RATE, sets={})
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in SETS.items():
            manifest["sets"][name] = make_set(name, spec, args.out, tmp)
    with open(os.path.join(args.out, "vad_manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
