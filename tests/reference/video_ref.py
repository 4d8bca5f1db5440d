"""Writes the video test set and what PyAV 10 (+ torchvision 0.14) makes of it.

    /usr/bin/python3 tests/reference/video_ref.py --out DIR

The clips are made here, at test time, with the ffmpeg CLI from lavfi sources (testsrc2 with a
small white box moving over it, so that every frame differs), one encoder thread each, so the
same ffmpeg makes the same bytes: H.264 in MP4 with B-frames and a key frame every 12 frames (so
that seeking matters; also full range yuvj420p, BT.709-tagged, 4:4:4, 10-bit and an odd size),
HEVC, VP9 (an odd size) and VP8 in WebM, AV1 in Matroska (4:2:0 and RGB; decoded by libdav1d,
as PyAV gets it), MPEG-4 part 2 and MJPEG in AVI, and a 1x1 clip. For each, DIR/manifest.json records:
  file, container (libavformat's name), codec, width, height
  fps:     float(stream.average_rate)
  frames:  len(list(container.decode(video=0)))
  indices: the frames asked for (ascending, with a repeat, across key frames)
  expect:  uint8 [len(indices), H, W, 3], frame.to_ndarray(format="rgb24") of each
  torchvision: frames and fps of torchvision.io.read_video / read_video_timestamps, and whether
           read_video's frames are PyAV's (it converts with frame.to_rgb(), the same call)
"""

import argparse
import json
import os
import subprocess
import sys
import warnings

import av
import numpy as np

FFMPEG = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-y"]


def box_source(size, rate, seconds):
    """testsrc2 with a 10x10 white box moving 3 pixels a frame (lavfi graph)."""
    return (f"testsrc2=s={size}:r={rate}:d={seconds},format=rgb24[bg];"
            f"color=c=white:s=10x10:r={rate}:d={seconds},format=rgb24[b];"
            f"[bg][b]overlay=x=mod(3*n\\,W-10):y=H/3:shortest=1:format=rgb")


# name, lavfi (size, rate, seconds), encoder arguments, output extension
CLIPS = [
    ("h264_bframes_g12", ("322x182", 25, 3),
     ["-c:v", "libx264", "-preset", "veryfast", "-crf", "23", "-g", "12", "-bf", "2",
      "-pix_fmt", "yuv420p", "-threads", "1"], "mp4"),
    ("h264_full_range", ("160x120", 25, 1),
     ["-c:v", "libx264", "-preset", "veryfast", "-g", "12", "-pix_fmt", "yuvj420p", "-threads", "1"],
     "mp4"),
    ("h264_bt709_tagged", ("160x90", 30, 1),
     ["-c:v", "libx264", "-preset", "veryfast", "-g", "12", "-pix_fmt", "yuv420p",
      "-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709", "-threads", "1"],
     "mp4"),
    ("h264_444", ("128x72", 25, 1),
     ["-c:v", "libx264", "-preset", "veryfast", "-g", "12", "-pix_fmt", "yuv444p", "-threads", "1"],
     "mkv"),
    ("h264_10bit", ("128x72", 25, 1),
     ["-c:v", "libx264", "-preset", "veryfast", "-g", "12", "-pix_fmt", "yuv420p10le",
      "-threads", "1"], "mp4"),
    ("hevc_g12", ("128x72", 25, 2),
     ["-c:v", "libx265", "-x265-params", "log-level=error:pools=none:frame-threads=1", "-g", "12",
      "-bf", "2", "-pix_fmt", "yuv420p"], "mp4"),
    ("vp9_odd_size", ("322x182", 30, 2),
     ["-vf", "crop=321:181:0:0", "-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8",
      "-crf", "30", "-b:v", "0", "-g", "12", "-pix_fmt", "yuv420p", "-threads", "1"], "webm"),
    ("vp8", ("120x68", 25, 1),
     ["-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8", "-g", "12", "-threads", "1"],
     "webm"),
    ("av1_g12", ("160x90", 24, 1.5),
     ["-c:v", "libaom-av1", "-cpu-used", "8", "-crf", "30", "-g", "12", "-pix_fmt", "yuv420p",
      "-threads", "1"], "mkv"),
    ("av1_gbrp", ("64x48", 24, 0.5),  # RGB coded as such (identity matrix): gbrp frames
     ["-c:v", "libaom-av1", "-cpu-used", "8", "-crf", "30", "-pix_fmt", "gbrp", "-threads", "1"],
     "mkv"),
    ("mpeg4_avi", ("176x144", 10, 2),
     ["-c:v", "mpeg4", "-q:v", "3", "-g", "12", "-bf", "0", "-threads", "1"], "avi"),
    ("mjpeg_avi", ("96x64", 10, 1), ["-c:v", "mjpeg", "-q:v", "3", "-threads", "1"], "avi"),
    ("one_pixel", ("16x16", 10, 0.5),
     ["-vf", "scale=1:1", "-c:v", "libvpx-vp9", "-deadline", "realtime", "-pix_fmt", "yuv420p",
      "-threads", "1"], "webm"),
]


def indices_for(n):
    """Frames across key frames (every 12), a repeat, the last one."""
    want = [0, 1, 2, 13, 13, 25, n // 2, n - 2, n - 1]
    return sorted(i for i in want if 0 <= i < n)


def make(out, name, src, args, ext):
    size, rate, seconds = src
    path = f"{name}.{ext}"
    subprocess.run(FFMPEG + ["-f", "lavfi", "-i", box_source(size, rate, seconds)] + args +
                   [os.path.join(out, path)], check=True)
    return path


def codec_name(path):
    """avcodec_get_name of the first video stream (PyAV names the decoder: libdav1d for AV1)."""
    r = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                        "stream=codec_name", "-of", "default=nw=1:nk=1", path],
                       check=True, capture_output=True, text=True)
    return r.stdout.strip()


def pyav_frames(path):
    with av.open(path) as c:
        s = c.streams.video[0]
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
        return (frames, c.format.name, s.width, s.height, float(s.average_rate),
                s.codec_context.codec.name)


def torchvision_info(path, pyav):
    import torchvision.io
    warnings.filterwarnings("ignore", message="The pts_unit 'pts' gives wrong results")
    pts, fps = torchvision.io.read_video_timestamps(path, pts_unit="pts")
    video, _, info = torchvision.io.read_video(path, pts_unit="pts", output_format="THWC")
    v = video.numpy()
    same = v.shape[0] == len(pyav) and all(np.array_equal(v[i], pyav[i]) for i in range(len(pyav)))
    return {"frames": int(v.shape[0]), "timestamps": len(pts), "fps": float(fps),
            "info_fps": float(info.get("video_fps", 0.0)), "same_as_pyav": bool(same)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-torchvision", action="store_true")
    a = ap.parse_args()
    out = a.out
    os.makedirs(out, exist_ok=True)
    manifest = {"pyav": av.__version__, "clips": []}
    for name, src, args, ext in CLIPS:
        path = make(out, name, src, args, ext)
        frames, container, w, h, fps, decoder = pyav_frames(os.path.join(out, path))
        codec = codec_name(os.path.join(out, path))
        idx = indices_for(len(frames))
        expect = np.stack([frames[i] for i in idx]).astype(np.uint8)
        np.save(os.path.join(out, f"{name}.npy"), expect)
        entry = {"name": name, "file": path, "container": container, "codec": codec,
                 "decoder": decoder, "width": w, "height": h, "fps": fps, "frames": len(frames),
                 "indices": idx, "expect": f"{name}.npy"}
        if not a.no_torchvision:
            entry["torchvision"] = torchvision_info(os.path.join(out, path), frames)
        manifest["clips"].append(entry)
    with open(os.path.join(out, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)


if __name__ == "__main__":
    sys.exit(main())
