#!/usr/bin/env python3
"""First-token latency after the end of speech over the Realtime WebSocket: segmented prefill
(each voice segment encoded and prefilled while the user still speaks) against whole-buffer
(the same items, nothing prefilled before the commit: session.mmrt.segmented_prefill false), for
~5, ~10 and ~30 s espeak-ng utterances (sentences with 600 ms pauses, 200 ms of silence after
the last word), the same audio and model both ways, in one run.

The audio is streamed in 100 ms appends paced at --speed x real time; the client then sends
input_audio_buffer.commit + response.create at once and times the first response.text.delta
(client) and response.done's mmrt.ttft_ms (server, from the response's submission). Each
measurement runs on a fresh server (no cache shared between the two ways).

    /usr/bin/python3 bench/realtime_ttft.py [--mmrt build/release/tools/mmrt] [--reps 2]
"""
import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
import checks_realtime as cr  # noqa: E402
from server_test import Server  # noqa: E402

SENTENCES = ["The quick brown fox jumps over the lazy dog.",
             "Then it runs far away into the forest.",
             "Birds sing in the tall green trees every morning.",
             "A small boat sails slowly across the quiet lake.",
             "Please tell me what you heard in this recording.",
             "The weather today is cold, with a little rain."]


def utterance(work, seconds):
    """Sentences with pauses until about `seconds` of 16 kHz PCM16."""
    chosen, pcm = [], b""
    while len(pcm) < seconds * 32000 and len(chosen) < 40:
        chosen.append(SENTENCES[len(chosen) % len(SENTENCES)])
        pcm = cr.speech_pcm(work, 16000, chosen)
    return pcm


def run_once(port, pcm, segmented, speed, model_id="tiny_audio"):
    ws = cr.WsClient(port, path=f"/v1/realtime?model={model_id}")
    ws.until("session.created")
    ws.send({"type": "session.update", "session": {
        "instructions": cr.INSTRUCTIONS, "turn_detection": None, "temperature": 0,
        "max_response_output_tokens": 4,
        "mmrt": {"input_sample_rate": 16000, "segmented_prefill": segmented}}})
    ws.until("session.updated")
    step = 1600 * 2  # 100 ms
    t0 = time.perf_counter()
    for k, at in enumerate(range(0, len(pcm), step)):
        wait = t0 + k * 0.1 / speed - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        ws.send({"type": "input_audio_buffer.append",
                 "audio": base64.b64encode(pcm[at:at + step]).decode()})
    wait = t0 + len(pcm) / 32000 / speed - time.perf_counter()
    if wait > 0:
        time.sleep(wait)
    t_commit = time.perf_counter()
    ws.send({"type": "input_audio_buffer.commit"})
    ws.send({"type": "response.create"})
    first = None
    while True:
        ev = ws.recv()
        if ev is None:
            raise RuntimeError("closed")
        if ev["type"] in ("response.text.delta", "response.done") and first is None:
            first = time.perf_counter() - t_commit
        if ev["type"] == "error":
            raise RuntimeError(ev)
        if ev["type"] == "response.done":
            break
    ws.close()
    r = ev["response"]
    return {"client_ms": first * 1e3, "server_ms": r["mmrt"]["ttft_ms"],
            "items": len(r["mmrt"]["items"]), "prefills": r["mmrt"]["prefills"],
            "cached": r["usage"]["input_token_details"]["cached_tokens"],
            "prompt": r["usage"]["input_tokens"], "trace": r["mmrt"]["trace"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mmrt", default=os.path.join(ROOT, "build", "release", "tools", "mmrt"))
    ap.add_argument("--work", default="/tmp/mmrt_realtime_bench")
    ap.add_argument("--lengths", default="5,10,30")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--speed", type=float, default=1.0, help="x real time (1: live)")
    ap.add_argument("--size", default="tiny", choices=["tiny", "small"],
                    help="make-tiny-model --size of the qwen2-audio checkpoint (default tiny)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    model = os.path.join(a.work, f"{a.size}_audio")
    if not os.path.exists(os.path.join(model, "config.json")):
        subprocess.run([a.mmrt, "make-tiny-model", "--arch", "qwen2-audio", "--size", a.size,
                        "--out", model], check=True, stdout=subprocess.DEVNULL)
    cfg = json.load(open(os.path.join(model, "config.json")))
    ac, tc = cfg["audio_config"], cfg["text_config"]
    print(f"model: make-tiny-model --arch qwen2-audio --size {a.size} ({model}): real 30 s audio "
          f"window ({ac['num_mel_bins']} mels, {ac['max_source_positions']} positions), encoder "
          f"d_model {ac['d_model']} x {ac['encoder_layers']} layers, LLM hidden "
          f"{tc['hidden_size']} x {tc['num_hidden_layers']} layers; audio streamed at "
          f"{a.speed:g}x real time, {a.reps} reps (median)")
    rows = []
    for L in [float(x) for x in a.lengths.split(",")]:
        pcm = utterance(a.work, L)
        res = {}
        for segmented in (True, False):
            runs = []
            for _ in range(a.reps):
                srv = Server(a.mmrt, model, a.work)
                try:
                    runs.append(run_once(srv.port, pcm, segmented, a.speed,
                                         os.path.basename(model)))
                finally:
                    srv.stop()
            res[segmented] = runs
        rows.append((L, len(pcm) / 32000, res))
    med = statistics.median
    print(f"{'target':>6} {'audio s':>7} {'items':>5} | {'streaming ms':>12} {'(server)':>9} "
          f"{'cached':>7} | {'whole-buffer ms':>15} {'(server)':>9} | {'ratio':>6}")
    for L, secs, res in rows:
        s, w = res[True], res[False]
        sc, wc = med(r["client_ms"] for r in s), med(r["client_ms"] for r in w)
        print(f"{L:>6.0f} {secs:>7.2f} {s[0]['items']:>5} | {sc:>12.1f} "
              f"{med(r['server_ms'] for r in s):>9.1f} {s[0]['cached']:>3}/{s[0]['prompt']:<3} | "
              f"{wc:>15.1f} {med(r['server_ms'] for r in w):>9.1f} | {wc / sc:>5.1f}x")
    print("ms: client-side time from input_audio_buffer.commit + response.create to the first "
          "response.text.delta; (server): response.done mmrt.ttft_ms; cached: prompt tokens "
          "from the prefix cache / prompt tokens; ratio: whole-buffer / streaming")


if __name__ == "__main__":
    main()
