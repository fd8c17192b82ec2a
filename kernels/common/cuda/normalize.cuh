// The group normalization of layer_norm (one group per row) and sparse_layer_norm (S groups of
// G = C / S features per row, optional fused ReLU), forward and backward, on the GPU. The math
// is that of kernels/common/normalize.h and the CPU backward kernels; statistics are in acc_t
// (f32; f64 for f64), which is also the dtype of the mean/rstd tensors.
//
//   cuda::normalize_forward<T>(x, gamma, beta, y, mean, rstd, units, G, S, eps, relu, stream, op);
//   cuda::normalize_backward<T>(g, x, mean, rstd, y_or_null, gamma, dx, dgamma, dbeta, rows, G, S,
//                               device, stream, op);
//
// Thread mapping. A unit (row u / S, segment u % S: G contiguous elements) is read in packs of
// 16 bytes, kPack<T> elements (f32 4, f64 2, bf16/f16 8). A team of `size` threads normalizes
// one unit; its thread `rank` keeps packs q = rank + i·size (i < kIters) in registers, so x (and
// g) are read from memory once. Teams are
//   - a warp (8 per block of 256 threads) for units of up to 32·8 packs forward (f32 1024,
//     bf16 2048, f64 512 elements) and 16 elements per lane backward (f64: 8; f32 and bf16
//     512 elements, f64 256);
//   - the block, threads = packs / kIters rounded up to a warp, for up to 4096 packs forward
//     (1024 threads) and 8192 elements backward (512 threads; f64 4096);
//   - beyond that, generic kernels that read the unit again for each pass.
// Loads and stores are 128-bit when G % kPack == 0 and every pointer is 16-byte aligned, else
// element by element. Both put the same element in the same register, so every sum, and every
// result, has the same bits either way. All sums are in a fixed order that depends on the
// shape only (no atomics): results are reproducible.
#pragma once

#include "kernels/common/cuda/normalize_backward.cuh"
#include "kernels/common/cuda/normalize_forward.cuh"
