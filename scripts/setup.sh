#!/usr/bin/env bash
# Installs everything mmrt needs to build, test and benchmark on Debian 12.
# Idempotent: packages already present are skipped, npm uses the lock file.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(
  build-essential cmake ninja-build pkg-config git clang-format clang libclang-rt-14-dev ccache
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libutf8proc-dev libpcre2-dev libxxhash-dev
  libdnnl-dev libopenblas-dev libseccomp-dev libboost-dev libcurl4-openssl-dev libyaml-cpp-dev
  libjpeg62-turbo-dev libspng-dev libwebp-dev libsndfile1-dev libsoxr-dev
  libavformat-dev libavcodec-dev libavutil-dev libswscale-dev ffmpeg
  python3 python3-numpy python3-torch python3-pil python3-skimage python3-jinja2
  python3-opencv python3-torchaudio python3-soundfile python3-scipy espeak-ng alsa-utils
  python3-torchvision python3-av
  chromium
  etcd-server nats-server libnats-dev

)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

if ((${#missing[@]})); then
  echo "[setup] installing ${#missing[@]} Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "[setup] Debian packages: all present"
fi

# Node.js: the machine may ship its own node+npm (which conflicts with Debian's npm package);
# install Debian's only when no npm is on PATH.
if ! command -v npm >/dev/null 2>&1; then
  echo "[setup] installing Node.js and npm from Debian"
  $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi

# npm packages used by the tokenizer conformance test and its benchmark (@lenml/tokenizers, and
# Hugging Face tokenizers' Rust library through @anush008/tokenizers' Node binding), the official openai
# client of the server tests (with ws, which its Realtime WebSocket client needs) and
# playwright-core, which drives Debian's Chromium to check the verify reports (lock file
# committed; it downloads no browser).
if [[ -f tests/js/package.json ]]; then
  if [[ ! -d tests/js/node_modules/@lenml/tokenizers || ! -f tests/js/node_modules/openai/package.json ||
        ! -f tests/js/node_modules/playwright-core/package.json ||
        ! -f tests/js/node_modules/@anush008/tokenizers/package.json ||
        ! -f tests/js/node_modules/ws/package.json ]]; then
    echo "[setup] installing npm packages (tests/js)"
    (cd tests/js && npm ci --no-audit --no-fund --silent)
  else
    echo "[setup] npm packages: present"
  fi
fi
