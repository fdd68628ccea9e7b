#!/usr/bin/python3
"""Golden data for tests/precision: float32 <-> float16 from numpy, float32 <-> bfloat16 from
torch, and loss-scale sequences from torch's GradScaler update rule.

Run from anywhere with /usr/bin/python3 (numpy 1.24, torch 1.13 from Debian); it rewrites the
files next to it. The files are reproducible byte for byte (fixed seeds, no HDF5 timestamps).

conversions.h5 holds one group per case set, each with datasets `input` and `output` of bit
patterns (uint32 for float32, uint16 for float16/bfloat16), compressed with HDF5's shuffle and
deflate filters (the structured tables shrink ~50x that way):
  /f16_to_f32       every float16 pattern -> float32          (numpy astype(float32))
  /f32_to_f16_grid  every float16 value, the midpoints to the next magnitude and the float32
                    values next to those midpoints -> float16  (numpy astype(float16), RNE)
  /f32_to_f16_edge  edge cases and random patterns -> float16  (numpy astype(float16))
  /bf16_to_f32      every bfloat16 pattern -> float32         (torch .to(torch.float32))
  /f32_to_bf16      edge cases, sampled midpoints, random patterns -> bfloat16
                    (torch .to(torch.bfloat16))

NaN results: numpy keeps a signalling NaN signalling and torch returns a canonical positive NaN
(0x7fc0 scalar, 0xffff vectorised), whereas mpitrain's contract is "NaN stays NaN, quiet, sign
kept". The tests therefore compare NaN results by that property, not by bits.

loss_scaler_sequences.txt: update sequences of torch's `_amp_update_scale_` (torch 1.13 has no
CPU kernel for it, so the rule of aten/src/ATen/native/cuda/AmpKernels.cu is re-implemented
below in float32 exactly as the kernel computes it), and one sequence of the hysteresis variant
(apex `update_scale_hysteresis`, Megatron's consecutive-hysteresis scaler).
"""

import pathlib

import h5py
import numpy as np
import torch

HERE = pathlib.Path(__file__).resolve().parent


H5 = h5py.File(HERE / "conversions.h5", "w")


def write_cases(name, inputs, outputs, source):
    assert len(inputs) == len(outputs)
    group = H5.create_group(name)
    group.attrs["source"] = source
    for key, data in (("input", inputs), ("output", outputs)):
        group.create_dataset(key, data=data, chunks=(len(data),), compression="gzip", compression_opts=9,
                             shuffle=True, track_times=False)
    print(f"{name}: {len(inputs)} cases")


def f32_bits(values):
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def from_bits(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def numpy_to_f16(bits_u32):
    with np.errstate(all="ignore"):
        return from_bits(bits_u32).astype(np.float16).view(np.uint16)


def torch_to_bf16(bits_u32):
    t = torch.from_numpy(from_bits(bits_u32).copy())
    return t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


# ---- float16 (numpy) -------------------------------------------------------------------------

all16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)
f16_values = all16.view(np.float16).astype(np.float32)
write_cases("f16_to_f32", all16, f16_values.view(np.uint32), f"numpy {np.__version__}")

# Every float16 pattern's float32 value; for finite ones also the midpoint to the next larger
# magnitude (65520 after 65504) and the float32 values just below and above that midpoint.
grid = []
for h in range(65536):
    value = np.float64(f16_values[h])
    grid.append(f32_bits(value))
    if (h & 0x7C00) == 0x7C00:
        continue  # inf or NaN: no neighbour
    sign = -1.0 if h & 0x8000 else 1.0
    nxt = sign * 65536.0 if (h & 0x7FFF) == 0x7BFF else np.float64(f16_values[h + 1])
    mid = np.float32((value + nxt) / 2)  # exact: 12 significant bits
    assert np.float64(mid) == (value + nxt) / 2
    grid.append(f32_bits(mid))
    grid.append(f32_bits(np.nextafter(mid, np.float32(0))))
    grid.append(f32_bits(np.nextafter(mid, np.float32(sign * np.inf))))
grid = np.array(grid, dtype=np.uint32)
write_cases("f32_to_f16_grid", grid, numpy_to_f16(grid), f"numpy {np.__version__}")

rng = np.random.default_rng(20240601)
edge16 = [
    0x00000000, 0x00000001, 0x00000002, 0x00400000, 0x007FFFFF, 0x00800000,  # f32 subnormals
    0x33000000, 0x33000001, 0x32FFFFFF, 0x33800000, 0x33C00000, 0x34200000,  # around 2^-25, 2^-24
    0x387FC000, 0x387FE000, 0x387FFFFF, 0x38800000, 0x38801000, 0x38802000,  # subnormal/normal
    0x3F800000, 0x3F801000, 0x3F803000, 0x3F801001, 0x3F802FFF,              # ties at 1.0
    0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x47800000,              # 65504 .. 65536
    0x4B800000, 0x501502F9, 0x7F7FFFFF, 0x7F800000,                          # large, FLT_MAX, inf
    0x7FC00000, 0x7FC00001, 0x7FD55555, 0x7FFFE000, 0x7FFFFFFF,              # quiet NaNs
    0x7F800001, 0x7F801FFF, 0x7F802000, 0x7FA00000, 0x7FBFFFFF,              # signalling NaNs
]
edge16 = edge16 + [b | 0x80000000 for b in edge16]
random_bits = rng.integers(0, 2**32, size=4000, dtype=np.uint64).astype(np.uint32)
# Random values inside float16's range (exponents 2^-26 .. 2^16) hit far more interesting cases.
in_range = (rng.integers(0, 2**23, size=4000, dtype=np.uint64) |
            (rng.integers(101, 144, size=4000, dtype=np.uint64) << 23) |
            (rng.integers(0, 2, size=4000, dtype=np.uint64) << 31)).astype(np.uint32)
edge16 = np.concatenate([np.array(edge16, dtype=np.uint32), random_bits, in_range])
write_cases("f32_to_f16_edge", edge16, numpy_to_f16(edge16), f"numpy {np.__version__}")

# ---- bfloat16 (torch) ------------------------------------------------------------------------

bf16_as_f32 = torch.from_numpy(all16.view(np.int16).copy()).view(torch.bfloat16).to(torch.float32)
write_cases("bf16_to_f32", all16, bf16_as_f32.view(torch.int32).numpy().view(np.uint32),
            f"torch {torch.__version__}")

edge_bf = [
    0x00000000, 0x00000001, 0x00007FFF, 0x00008000, 0x00008001, 0x00018000, 0x007FFFFF,
    0x00800000, 0x3F800000, 0x3F807FFF, 0x3F808000, 0x3F808001, 0x3F818000, 0x3F81FFFF,
    0x7F7F0000, 0x7F7F7FFF, 0x7F7F8000, 0x7F7EFFFF, 0x7F7FFFFF, 0x7F800000,
    0x7FC00000, 0x7FC00001, 0x7FD55555, 0x7FFFFFFF, 0x7F800001, 0x7F807FFF, 0x7F808000,
    0x7F810000, 0x7FA00000, 0x7FBFFFFF,
]
edge_bf = edge_bf + [b | 0x80000000 for b in edge_bf]
# Midpoints between a sample of neighbouring bfloat16 values, and the float32 values next to
# them: the bfloat16 pattern b (as float32 bits b << 16) plus 0x8000 is the midpoint to b + 1.
sample = rng.integers(0, 0x7F7F, size=1000, dtype=np.uint64).astype(np.uint32)
sample = np.concatenate([sample, sample | 0x8000])
mids = (sample << 16) | 0x8000
bf_mid = np.concatenate([mids, mids - 1, mids + 1])
random_bf = rng.integers(0, 2**32, size=4000, dtype=np.uint64).astype(np.uint32)
edge_bf = np.concatenate([np.array(edge_bf, dtype=np.uint32), bf_mid, random_bf])
write_cases("f32_to_bf16", edge_bf, torch_to_bf16(edge_bf), f"torch {torch.__version__}")
H5.close()

# ---- loss scaler -----------------------------------------------------------------------------


def amp_update_scale(scale, tracker, found_inf, growth_factor, backoff_factor, interval):
    """torch 1.13 amp_update_scale_cuda_kernel; scale is float32, factors are double."""
    if found_inf:
        return np.float32(np.float64(scale) * backoff_factor), 0
    successful = tracker + 1
    if successful == interval:
        with np.errstate(over="ignore"):  # float32 overflow is the case being modelled
            new_scale = np.float32(np.float64(scale) * growth_factor)
        if np.isfinite(new_scale):
            scale = new_scale
        return scale, 0
    return scale, successful


def hysteresis_update(scale, tracker, hyst, found_inf, growth_factor, backoff_factor, interval,
                      hysteresis):
    """apex update_scale_hysteresis_cuda_kernel (consecutive hysteresis)."""
    if found_inf:
        hyst -= 1
        if hyst > 0:
            return scale, 0, hyst
    scale, tracker = amp_update_scale(scale, tracker, found_inf, growth_factor, backoff_factor,
                                      interval)
    if not found_inf:
        hyst = hysteresis
    return scale, tracker, hyst


def sequence(name, init_scale, growth_factor, backoff_factor, interval, hysteresis, found):
    lines = [f"sequence {name} {init_scale!r} {growth_factor!r} {backoff_factor!r} {interval} "
             f"{hysteresis} {len(found)}"]
    scale, tracker, hyst = np.float32(init_scale), 0, hysteresis
    for inf in found:
        if hysteresis == 1:
            scale, tracker = amp_update_scale(scale, tracker, inf, growth_factor, backoff_factor,
                                              interval)
        else:
            scale, tracker, hyst = hysteresis_update(scale, tracker, hyst, inf, growth_factor,
                                                     backoff_factor, interval, hysteresis)
        # apex lets its tracker drop to 0 or below after a backoff; mpitrain reports the same
        # state as "1 overflow left until the next backoff" (DeepSpeed's convention).
        lines.append(f"{int(inf)} {int(np.float32(scale).view(np.uint32)):08x} {tracker} "
                     f"{max(hyst, 1)}")
    return lines


def pattern(n, p_inf, seed):
    return [bool(x) for x in np.random.default_rng(seed).random(n) < p_inf]


out = [
    "# Loss-scale update sequences. Header: sequence <name> <init_scale> <growth_factor>",
    "# <backoff_factor> <growth_interval> <hysteresis> <steps>; then one line per update:",
    "# <found_inf> <scale after the update, float32 bits in hex> <growth_tracker> <hysteresis_left>",
]
out += sequence("torch_defaults_interval5", 65536.0, 2.0, 0.5, 5, 1, pattern(400, 0.12, 1))
out += sequence("torch_odd_factors", 1000.5, 1.7, 0.3, 3, 1, pattern(400, 0.25, 2))
out += sequence("torch_growth_capped_at_fp32_max", 2.0**125, 2.0, 0.5, 2, 1,
                pattern(60, 0.05, 3))
# 150 overflows take 1.0 down through the float32 subnormals to exactly 0 (torch would go on
# multiplying 0; mpitrain throws MinLossScaleError at the next overflow, tested separately).
out += sequence("torch_underflow_to_zero", 1.0, 2.0, 0.5, 1000, 1, [True] * 150)
out += sequence("apex_hysteresis3", 65536.0, 2.0, 0.5, 4, 3, pattern(400, 0.35, 4))
(HERE / "loss_scaler_sequences.txt").write_text("\n".join(out) + "\n")
print(f"loss_scaler_sequences.txt: {len(out)} lines")
