#!/usr/bin/env python3
"""Reference float conversions for the core conversion test.

usage: convert_ref.py IN_F32.bin OUT_DIR
Reads little-endian float32 values and writes, with PyTorch and numpy:
  f16_torch.bin   torch.float32 -> torch.float16 bits
  f16_numpy.bin   numpy float32 -> float16 bits
  bf16_torch.bin  torch.float32 -> torch.bfloat16 bits
  f16_to_f32.bin  every one of the 65536 float16 bit patterns -> float32 (numpy)
  bf16_to_f32.bin every one of the 65536 bfloat16 bit patterns -> float32 (torch)
"""
import sys, os
import numpy as np
import torch

src, out = sys.argv[1], sys.argv[2]
x = np.fromfile(src, dtype='<f4')
t = torch.from_numpy(x.copy())
t.to(torch.float16).view(torch.int16).numpy().astype('<i2').tofile(os.path.join(out, 'f16_torch.bin'))
x.astype(np.float16).view('<u2').tofile(os.path.join(out, 'f16_numpy.bin'))
t.to(torch.bfloat16).view(torch.int16).numpy().astype('<i2').tofile(os.path.join(out, 'bf16_torch.bin'))
allbits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
allbits.view(np.float16).astype(np.float32).tofile(os.path.join(out, 'f16_to_f32.bin'))
torch.from_numpy(allbits.view(np.int16).copy()).view(torch.bfloat16).to(torch.float32).numpy().tofile(
    os.path.join(out, 'bf16_to_f32.bin'))
