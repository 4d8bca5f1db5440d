"""Reference data for mmrt's audio decoding, resampling and Whisper log-mel features.

    /usr/bin/python3 tests/reference/whisper_mel_ref.py --out DIR

Written from the definitions in transformers (audio_utils.mel_filter_bank / window_function /
spectrogram and WhisperFeatureExtractor: pad or truncate to n_samples, the numpy float64 path),
not copied from them, plus the torchaudio 0.13 float32 path; decoding by python-soundfile (the
same libsndfile) and resampling by scipy.signal.resample_poly. DIR/manifest.json lists:
  mel:      input clip (f32) -> hf (numpy float64 path, f32 [n_mels, n_frames]), ta (torchaudio
            float32 path), hf_log (log10 before the clamp, cast to f32) for some
  decode:   an audio file -> soundfile's samples, downmixed as librosa.to_mono does
  resample: an audio file -> scipy resample_poly of soundfile's samples (float64 -> f32), with
            scipy's default filter and with a sharp one
Also imported by bench/mel_compare.py (hf_features, hf_features_vectorised, ta_features).
"""

import argparse
import io
import json
import os
import sys

import numpy as np

N_FFT, HOP, RATE = 400, 160, 16000


# ------------------------------------------------------------ HF numpy float64 path (rewritten)
def hz_to_mel(f):
    """Slaney: linear below 1 kHz, logarithmic above (scalar or array)."""
    f = np.asarray(f, dtype=np.float64)
    lin = 3.0 * f / 200.0
    log = 15.0 + np.log(np.maximum(f, 1e-300) / 1000.0) * (27.0 / np.log(6.4))
    return np.where(f >= 1000.0, log, lin)


def mel_to_hz(m):
    m = np.asarray(m, dtype=np.float64)
    lin = 200.0 * m / 3.0
    log = 1000.0 * np.exp(np.log(6.4) / 27.0 * (m - 15.0))
    return np.where(m >= 15.0, log, lin)


def slaney_filters(n_mels, n_fft=N_FFT, rate=RATE, f_max=8000.0):
    """[n_bins, n_mels] float64, as mel_filter_bank(norm="slaney", mel_scale="slaney")."""
    n_bins = n_fft // 2 + 1
    edges = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(f_max), n_mels + 2))
    bins = np.linspace(0, rate // 2, n_bins)
    gaps = np.diff(edges)
    rel = edges[None, :] - bins[:, None]  # [n_bins, n_mels + 2]
    rising = -rel[:, :-2] / gaps[:-1]
    falling = rel[:, 2:] / gaps[1:]
    tri = np.maximum(np.zeros(1), np.minimum(rising, falling))
    return tri * (2.0 / (edges[2:] - edges[:-2]))[None, :]


def hann_periodic(n):
    return np.hanning(n + 1)[:-1]


def pad_clip(x, n_samples):
    """WhisperFeatureExtractor.__call__: float32, zero-padded or truncated to n_samples."""
    x = np.asarray(x, dtype=np.float32)[:n_samples]
    return np.pad(x, (0, n_samples - len(x)))


def _finish(log_spec):
    """log10 already taken (float64); HF casts to float32, drops the last frame, clamps per item."""
    log_spec = log_spec.astype(np.float32)[:, :-1]
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


def hf_log_mel(x, n_mels, n_samples, n_fft=N_FFT, hop=HOP):
    """The frame loop of audio_utils.spectrogram (float64 FFT, complex64 storage, as HF)."""
    wave = np.pad(pad_clip(x, n_samples), (n_fft // 2, n_fft // 2), mode="reflect").astype(np.float64)
    window = hann_periodic(n_fft)
    n_frames = 1 + (len(wave) - n_fft) // hop
    spec = np.empty((n_frames, n_fft // 2 + 1), dtype=np.complex64)
    for t in range(n_frames):
        spec[t] = np.fft.rfft(wave[t * hop : t * hop + n_fft] * window)
    power = np.abs(spec, dtype=np.float64) ** 2.0
    mel = np.maximum(1e-10, slaney_filters(n_mels, n_fft).T @ power.T)
    return np.log10(mel)  # [n_mels, n_frames + 1], float64


def hf_features(x, n_mels, n_samples=480000, n_fft=N_FFT, hop=HOP):
    return _finish(hf_log_mel(x, n_mels, n_samples, n_fft, hop))


def hf_features_vectorised(x, n_mels, n_samples=480000, n_fft=N_FFT, hop=HOP, filters=None):
    """The same numbers with all frames at once (stride tricks, one rfft call)."""
    wave = np.pad(pad_clip(x, n_samples), (n_fft // 2, n_fft // 2), mode="reflect").astype(np.float64)
    frames = np.lib.stride_tricks.sliding_window_view(wave, n_fft)[::hop]
    spec = np.fft.rfft(frames * hann_periodic(n_fft), axis=-1).astype(np.complex64)
    power = np.abs(spec, dtype=np.float64) ** 2.0
    if filters is None:
        filters = slaney_filters(n_mels, n_fft)
    return _finish(np.log10(np.maximum(1e-10, filters.T @ power.T)))


def ta_features(x, n_mels, n_samples=480000, n_fft=N_FFT, hop=HOP, transform=None):
    """torchaudio 0.13 MelSpectrogram (float32) + the Whisper log/clamp/scale in float32."""
    import torch
    import torchaudio

    if transform is None:
        transform = torchaudio.transforms.MelSpectrogram(
            RATE, n_fft=n_fft, hop_length=hop, n_mels=n_mels, f_min=0.0, f_max=8000.0, power=2.0,
            center=True, pad_mode="reflect", norm="slaney", mel_scale="slaney")
    with torch.no_grad():
        mel = transform(torch.from_numpy(pad_clip(x, n_samples)))[..., :-1]
        log_spec = torch.clamp(mel, min=1e-10).log10()
        log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
        return ((log_spec + 4.0) / 4.0).numpy().astype(np.float32)


# ------------------------------------------------------------------------------- test inputs
def tones_and_noise(seconds, seed):
    rng = np.random.default_rng(seed)
    t = np.arange(int(round(seconds * RATE))) / RATE
    x = 0.2 * np.sin(2 * np.pi * 440 * t) + 0.1 * np.sin(2 * np.pi * 3000 * t + 0.3)
    x += 0.05 * np.sin(2 * np.pi * (200 + 150 * t) * t)  # a slow chirp
    x += 0.02 * rng.standard_normal(len(t))
    x *= 0.5 + 0.5 * np.sin(2 * np.pi * 0.25 * t) ** 2  # loudness envelope
    return x.astype(np.float32)


def resample_poly(x, rate_in, rate_out, sharp=False):
    """scipy's polyphase resampler: its default Kaiser (beta 5, 10 taps a phase) filter, or a
    sharp one (Kaiser beta 12, 40 taps a phase, cutoff at 0.95 of the output Nyquist)."""
    from math import gcd

    from scipy.signal import firwin
    from scipy.signal import resample_poly as rp

    g = gcd(rate_in, rate_out)
    up, down = rate_out // g, rate_in // g
    window = ("kaiser", 5.0)
    if sharp:
        taps = max(up, down)
        window = firwin(2 * 40 * taps + 1, 0.95 / taps, window=("kaiser", 12.0))
    return rp(x.astype(np.float64), up, down, window=window).astype(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    out = ap.parse_args().out
    os.makedirs(out, exist_ok=True)
    import soundfile as sf

    manifest = {"mel": [], "decode": [], "resample": [],
                "soundfile": sf.__version__, "libsndfile": sf.__libsndfile_version__}

    def save(name, a):
        np.save(os.path.join(out, name), np.ascontiguousarray(a))
        return name

    front = "/usr/share/sounds/alsa/Front_Center.wav"
    front_x, front_rate = sf.read(front, dtype="float32")

    # ---- mel
    speech16 = resample_poly(front_x, front_rate, RATE)
    clipped = np.clip(3.0 * tones_and_noise(30.0, 3), -1.0, 1.0)
    mel_inputs = [
        ("tones_30s", tones_and_noise(30.0, 1), 480000),
        ("short_1_3s", tones_and_noise(1.3, 2), 480000),
        ("long_37s", tones_and_noise(37.0, 4), 480000),
        ("loud_clipped", clipped, 480000),
        ("silence", np.zeros(480000, np.float32), 480000),
        ("speech", speech16, 480000),
        ("tiny_0_5s", tones_and_noise(0.5, 5), 9600),
        ("tiny_long", tones_and_noise(0.9, 6), 9600),
    ]
    for name, x, n_samples in mel_inputs:
        for n_mels in (80, 128):
            tag = f"{name}_{n_mels}"
            log = hf_log_mel(x, n_mels, n_samples)
            hf = _finish(log)
            vec = hf_features_vectorised(x, n_mels, n_samples)
            assert np.abs(vec - hf).max() <= 1e-6, (tag, np.abs(vec - hf).max())
            case = {"name": tag, "n_mels": n_mels, "n_fft": N_FFT, "hop": HOP, "n_samples": n_samples,
                    "input": save(f"mel_{tag}_in.npy", x), "hf": save(f"mel_{tag}_hf.npy", hf),
                    "ta": save(f"mel_{tag}_ta.npy", ta_features(x, n_mels, n_samples))}
            if name in ("tones_30s", "short_1_3s", "tiny_0_5s"):
                case["hf_log"] = save(f"mel_{tag}_log.npy", log[:, :-1].astype(np.float32))
            manifest["mel"].append(case)

    # ---- decode: files written by soundfile (and the real ALSA clip), decoded by soundfile
    def decode_case(name, data, tol):
        path = save_bytes(f"dec_{name}.bin", data)
        with sf.SoundFile(io.BytesIO(data)) as f:
            y = f.read(dtype="float32", always_2d=True)
            info = {"rate": f.samplerate, "channels": f.channels, "frames": f.frames,
                    "subtype": f.subtype}
        mono = np.mean(y.T, axis=0) if y.shape[1] > 1 else y[:, 0]  # librosa.to_mono
        manifest["decode"].append({"name": name, "file": path, "expected": save(f"dec_{name}.npy", mono),
                                   "tol": tol, **info})

    def save_bytes(name, data):
        with open(os.path.join(out, name), "wb") as fh:
            fh.write(data)
        return name

    def written(x, rate, fmt, subtype):
        b = io.BytesIO()
        sf.write(b, x, rate, format=fmt, subtype=subtype)
        return b.getvalue()

    with open(front, "rb") as fh:
        decode_case("alsa_front_center", fh.read(), 0.0)
    st = np.stack([tones_and_noise(2.0, 7), tones_and_noise(2.0, 8)], axis=1) * 1.5
    st = np.clip(st, -1, 1).astype(np.float32)
    mono = tones_and_noise(2.0, 9)
    six = np.clip(np.stack([tones_and_noise(1.0, 10 + c) * (c + 1) for c in range(6)], axis=1), -1, 1)
    for name, x, rate, fmt, sub in [
        ("wav_pcm16_stereo_44k", st, 44100, "WAV", "PCM_16"),
        ("wav_pcm24_mono_16k", mono, 16000, "WAV", "PCM_24"),
        ("wav_float_stereo_48k", st, 48000, "WAV", "FLOAT"),
        ("wav_u8_mono_8k", mono, 8000, "WAV", "PCM_U8"),
        ("wav_pcm16_6ch_48k", six.astype(np.float32), 48000, "WAV", "PCM_16"),
        ("flac_pcm16_stereo_44k", st, 44100, "FLAC", "PCM_16"),
        ("flac_pcm24_mono_16k", mono, 16000, "FLAC", "PCM_24"),
        ("ogg_vorbis_stereo_44k", st, 44100, "OGG", "VORBIS"),
        ("ogg_vorbis_mono_16k", mono, 16000, "OGG", "VORBIS"),
        ("ogg_opus_mono_48k", mono, 48000, "OGG", "OPUS"),
        ("mp3_stereo_44k", st, 44100, "MP3", "MPEG_LAYER_III"),
        ("mp3_mono_16k", mono, 16000, "MP3", "MPEG_LAYER_III"),
    ]:
        try:
            data = written(x, rate, fmt, sub)
        except Exception as e:  # this libsndfile cannot write it: say so, do not hide it
            print(f"whisper_mel_ref: cannot write {name}: {e}", file=sys.stderr)
            raise
        decode_case(name, data, 0.0)

    # ---- resample: soundfile decode + scipy polyphase (Kaiser) vs mmrt decode at 16 kHz
    def resample_case(name, file, x, rate_in):
        manifest["resample"].append({
            "name": name, "file": file, "rate_in": rate_in, "rate_out": RATE,
            "expected": save(f"rs_{name}.npy", resample_poly(x, rate_in, RATE)),
            "expected_sharp": save(f"rs_{name}_sharp.npy", resample_poly(x, rate_in, RATE, sharp=True))})

    resample_case("alsa_front_center", "dec_alsa_front_center.bin", front_x, front_rate)
    tone44 = (0.5 * np.sin(2 * np.pi * 1000 * np.arange(44100 * 2) / 44100)).astype(np.float32)
    resample_case("tone_44k", save_bytes("rs_tone44.bin", written(tone44, 44100, "WAV", "FLOAT")), tone44, 44100)

    with open(os.path.join(out, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)


if __name__ == "__main__":
    main()
