#!/bin/bash
# Packs executables with every shared library they load into one .tar.xz that runs on another
# Linux machine (the GPU machine: Ubuntu, a newer glibc, the NVIDIA driver), leaving out glibc's
# own libraries, the driver's and cuBLAS's, which must be the machine's. The CUDA runtime is linked
# statically (src/kernels/cuda); the GPU machine has cuBLAS 13 (what nvcc 13 links).
# usage: scripts/gpu/pack.sh OUT.tar.xz EXE...
# There: tar -C DIR -xJf OUT.tar.xz && LD_LIBRARY_PATH=DIR/pack/lib DIR/pack/EXE
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 OUT.tar.xz EXE..." >&2
  exit 2
fi
out=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/pack/lib"
for exe in "$@"; do
  [[ -x $exe ]] || { echo "pack: $exe is not an executable (build it first)" >&2; exit 1; }
  cp "$exe" "$work/pack/"
  if ldd "$exe" | grep -q "not found"; then
    echo "pack: $exe has unresolved libraries:" >&2
    ldd "$exe" | grep "not found" >&2
    exit 1
  fi
  ldd "$exe" | awk '/=> \//{print $1, $3}' | while read -r name path; do
    case $name in
      libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | libutil.so* | ld-linux* | \
        libresolv.so* | libcuda.so* | libnvidia* | libcublas*) continue ;;
    esac
    [[ -e $work/pack/lib/$name ]] || cp -L "$path" "$work/pack/lib/$name"
  done
done
mkdir -p "$(dirname "$out")"
tar -C "$work" -cf - pack | xz -T0 -6 > "$out"
echo "packed $# executables and $(ls "$work/pack/lib" | wc -l) libraries:" \
  "$(du -sh "$work/pack" | cut -f1) -> $(du -h "$out" | cut -f1) in $out"
