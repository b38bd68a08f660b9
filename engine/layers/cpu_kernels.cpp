// Integer products for the CPU, activations rounded to 8 bits in blocks of 32 (ragguard's own).
//
// PyTorch's CPU kernels for small weights are weight-only: they widen each 4- or 8-bit weight to
// bf16 inside the product, and on a CPU without native bf16 arithmetic that widening sets their
// speed. These multiply bytes with the CPU's integer dot products instead (AVX2's
// unsigned-by-signed byte multiply-add, what llama.cpp's AVX2 kernels build on), on
// activations quantized at call time: each row, in blocks of 32 columns, gets its own scale
// (largest magnitude onto 127), so an outlier costs precision in its block only.
//
// Two weight layouts, both in blocks of 32 input columns:
//   w4: codes q in 0..15 and per block a float16 scale d and offset m, w = q * d + m, repacked
//       at load into records that interleave 8 output rows (w4_pack; the layout is below).
//   w8: int8 weights with one float32 scale per output row (the engine's Int8Linear rows).
// For one block of activations x = dx * xq, with sx = dx * sum(xq):
//   w4: sum(w * x) = d * dx * sum(q * xq) + m * sx
//   w8: sum(w * x) = scale * dx * sum(qw * xq)
// Outputs are float32 [rows, out_features]; the work is split over output rows with
// at::parallel_for, so it runs on PyTorch's own threads.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <vector>

namespace {

constexpr int64_t kBlock = 32;

struct QuantizedRows {
  std::vector<int8_t> codes;  // [rows, cols]
  std::vector<float> scales;  // [rows, blocks]: dx
  std::vector<float> sums;    // [rows, blocks]: dx * sum(xq)
};

// Each row of x (float32 [rows, cols], contiguous) in blocks of 32, largest magnitude onto 127.
QuantizedRows quantize_rows(const float* x, int64_t rows, int64_t cols) {
  const int64_t blocks = cols / kBlock;
  QuantizedRows out;
  out.codes.resize(rows * cols);
  out.scales.resize(rows * blocks);
  out.sums.resize(rows * blocks);
  for (int64_t b = 0; b < rows * blocks; ++b) {
    const float* src = x + b * kBlock;
    int8_t* dst = out.codes.data() + b * kBlock;
    float amax = 0.0f;
    for (int64_t i = 0; i < kBlock; ++i) amax = std::fmax(amax, std::fabs(src[i]));
    const float scale = amax / 127.0f;
    const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
    int32_t total = 0;
    for (int64_t i = 0; i < kBlock; ++i) {
      const int32_t q = static_cast<int32_t>(std::nearbyint(src[i] * inverse));
      dst[i] = static_cast<int8_t>(q);
      total += q;
    }
    out.scales[b] = scale;
    out.sums[b] = scale * static_cast<float>(total);
  }
  return out;
}

// The w4 layout: output rows in groups of 8, and for each group and block of 32 input columns
// one record of kRecord bytes: 128 bytes of codes, then the 8 rows' float16 scales, then their
// float16 offsets. Byte i (0..31) of the codes' 32-byte vector v (0..3) holds row i / 4's code
// for column 4 * v + i % 4 in its low nibble and for column 4 * (v + 4) + i % 4 in its high one,
// so one vector holds four consecutive columns of each of the 8 rows, and a product with four
// activation bytes broadcast gives the 8 rows' partial sums side by side, one row per lane.
constexpr int64_t kRows = 8;
constexpr int64_t kCodeBytes = kRows * kBlock / 2;
constexpr int64_t kRecord = kCodeBytes + 2 * kRows * 2;
constexpr int64_t kAhead = 16;

inline uint8_t code_at(const uint8_t* q, int64_t row, int64_t col, int64_t cols) {
  return q[row * cols + col] & 0x0F;
}

// Up to kTile activation rows against one group of 8 weight rows, over every block.
template <int kTile>
void group_w4(const uint8_t* records, int64_t blocks, const QuantizedRows& xq, int64_t first_row,
              int64_t cols, float* out, int64_t out_stride) {
  const __m256i low_nibbles = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[kTile];
  for (int t = 0; t < kTile; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* record = records + b * kRecord;
    // The record kAhead blocks on: the hardware prefetcher alone left the stream short of the
    // memory's bandwidth.
    const char* ahead = reinterpret_cast<const char*>(record + kAhead * kRecord);
    _mm_prefetch(ahead, _MM_HINT_T0);
    _mm_prefetch(ahead + 64, _MM_HINT_T0);
    _mm_prefetch(ahead + 128, _MM_HINT_T0);
    __m256i sums[kTile];
    for (int t = 0; t < kTile; ++t) sums[t] = _mm256_setzero_si256();
    for (int v = 0; v < 4; ++v) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(record + 32 * v));
      const __m256i low = _mm256_and_si256(raw, low_nibbles);
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low_nibbles);
      for (int t = 0; t < kTile; ++t) {
        const int8_t* x = xq.codes.data() + (first_row + t) * cols + b * kBlock;
        int32_t first, second;
        std::memcpy(&first, x + 4 * v, 4);
        std::memcpy(&second, x + 4 * (v + 4), 4);
        // Each int16 lane gathers 8 pair sums of at most 2 * 15 * 127: 30480, within int16.
        sums[t] = _mm256_add_epi16(sums[t], _mm256_maddubs_epi16(low, _mm256_set1_epi32(first)));
        sums[t] =
            _mm256_add_epi16(sums[t], _mm256_maddubs_epi16(high, _mm256_set1_epi32(second)));
      }
    }
    const __m256 scales = _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(record + kCodeBytes)));
    const __m256 offsets = _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(record + kCodeBytes + 2 * kRows)));
    for (int t = 0; t < kTile; ++t) {
      const int64_t index = (first_row + t) * blocks + b;
      const __m256 dots = _mm256_cvtepi32_ps(_mm256_madd_epi16(sums[t], ones));
      acc[t] = _mm256_fmadd_ps(dots, _mm256_mul_ps(scales, _mm256_set1_ps(xq.scales[index])),
                               acc[t]);
      acc[t] = _mm256_fmadd_ps(offsets, _mm256_set1_ps(xq.sums[index]), acc[t]);
    }
  }
  for (int t = 0; t < kTile; ++t) _mm256_storeu_ps(out + t * out_stride, acc[t]);
}

inline float horizontal_sum(__m256 v) {
  __m128 low = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  low = _mm_add_ps(low, _mm_movehl_ps(low, low));
  low = _mm_add_ss(low, _mm_movehdup_ps(low));
  return _mm_cvtss_f32(low);
}

// One block's 32 u8 x s8 products, summed four at a time into eight float lanes.
inline __m256 block_dot(__m256i unsigned_bytes, __m256i signed_bytes) {
  // Pairs of products summed into int16 (127 * 127 * 2 fits), then pairs of those into int32.
  const __m256i pairs = _mm256_maddubs_epi16(unsigned_bytes, signed_bytes);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

float dot_w8(const int8_t* weights, const int8_t* xq, const float* dx, int64_t blocks) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(weights + b * kBlock));
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * kBlock));
    // s8 x s8 as u8 x s8: |w| times x carrying w's sign (w = -128 never occurs: weights are
    // symmetric in -127..127).
    const __m256 partial = block_dot(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    if (b & 1) {
      acc1 = _mm256_fmadd_ps(partial, _mm256_set1_ps(dx[b]), acc1);
    } else {
      acc0 = _mm256_fmadd_ps(partial, _mm256_set1_ps(dx[b]), acc0);
    }
  }
  return horizontal_sum(_mm256_add_ps(acc0, acc1));
}

void check_activations(const at::Tensor& x, int64_t in_features) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(),
              "activations must be a contiguous 2-d float32 tensor");
  TORCH_CHECK(x.size(1) == in_features, "activations have ", x.size(1), " columns, weights ",
              in_features);
  TORCH_CHECK(in_features % kBlock == 0, "input width must be a multiple of 32");
}

// Output rows handed to a thread at a time: a few rows' weights amortise the split.
constexpr int64_t kGrain = 16;

void run_w4(const QuantizedRows& xq, int64_t rows, int64_t in_features, const uint8_t* records,
            float* out, int64_t out_features) {
  const int64_t blocks = in_features / kBlock;
  const int64_t groups = out_features / kRows;
  at::parallel_for(0, groups, kGrain / kRows, [&](int64_t begin, int64_t end) {
    // Up to 4 activation rows share each group's unpacked codes; the group's records stay in
    // the core's cache between tiles.
    std::vector<float> tile(4 * kRows);
    for (int64_t g = begin; g < end; ++g) {
      const uint8_t* group = records + g * blocks * kRecord;
      for (int64_t m = 0; m < rows; m += 4) {
        const int64_t count = std::min<int64_t>(4, rows - m);
        switch (count) {
          case 1: group_w4<1>(group, blocks, xq, m, in_features, tile.data(), kRows); break;
          case 2: group_w4<2>(group, blocks, xq, m, in_features, tile.data(), kRows); break;
          case 3: group_w4<3>(group, blocks, xq, m, in_features, tile.data(), kRows); break;
          default: group_w4<4>(group, blocks, xq, m, in_features, tile.data(), kRows); break;
        }
        for (int64_t t = 0; t < count; ++t) {
          std::memcpy(out + (m + t) * out_features + g * kRows, tile.data() + t * kRows,
                      kRows * sizeof(float));
        }
      }
    }
  });
}

void run_w8(const QuantizedRows& xq, int64_t rows, int64_t in_features, const int8_t* weights,
            const float* row_scales, float* out, int64_t out_features) {
  const int64_t blocks = in_features / kBlock;
  at::parallel_for(0, out_features, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const int8_t* row = weights + n * in_features;
      for (int64_t m = 0; m < rows; ++m) {
        out[m * out_features + n] =
            row_scales[n] * dot_w8(row, xq.codes.data() + m * in_features,
                                          xq.scales.data() + m * blocks, blocks);
      }
    }
  });
}

void check_records(const at::Tensor& records, int64_t out_features, int64_t in_features) {
  TORCH_CHECK(records.scalar_type() == at::kByte && records.is_contiguous() &&
                  records.dim() == 3 && records.size(2) == kRecord,
              "records must be contiguous uint8 [out_features / 8, in_features / 32, ", kRecord,
              "] (w4_pack's)");
  TORCH_CHECK(out_features % kRows == 0 && in_features % kBlock == 0 &&
                  records.size(0) == out_features / kRows &&
                  records.size(1) == in_features / kBlock,
              "records do not match ", out_features, " x ", in_features, " weights");
}

// q [out, in] codes 0..15 (uint8), scales and offsets [out, in / 32] float32 -> records.
at::Tensor w4_pack(const at::Tensor& q, const at::Tensor& scales, const at::Tensor& offsets) {
  TORCH_CHECK(q.dim() == 2 && q.scalar_type() == at::kByte && q.is_contiguous(),
              "codes must be a contiguous 2-d uint8 tensor");
  const int64_t out_features = q.size(0);
  const int64_t cols = q.size(1);
  TORCH_CHECK(out_features % kRows == 0, "w4a8 needs output rows in multiples of 8, got ",
              out_features);
  TORCH_CHECK(cols % kBlock == 0, "w4a8 needs an input width divisible by 32, got ", cols);
  const int64_t blocks = cols / kBlock;
  for (const at::Tensor* t : {&scales, &offsets}) {
    TORCH_CHECK(t->scalar_type() == at::kFloat && t->is_contiguous() && t->dim() == 2 &&
                    t->size(0) == out_features && t->size(1) == blocks,
                "scales and offsets must be contiguous float32 [out_features, in_features / 32]");
  }
  at::Tensor records = at::empty({out_features / kRows, blocks, kRecord}, q.options());
  const uint8_t* codes = q.data_ptr<uint8_t>();
  const float* scale = scales.data_ptr<float>();
  const float* offset = offsets.data_ptr<float>();
  uint8_t* dst = records.data_ptr<uint8_t>();
  at::parallel_for(0, out_features / kRows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      for (int64_t b = 0; b < blocks; ++b) {
        uint8_t* record = dst + (g * blocks + b) * kRecord;
        for (int64_t v = 0; v < 4; ++v) {
          for (int64_t i = 0; i < 32; ++i) {
            const int64_t row = g * kRows + i / 4;
            const int64_t col = b * kBlock + 4 * v + i % 4;
            record[32 * v + i] = static_cast<uint8_t>(
                code_at(codes, row, col, cols) | (code_at(codes, row, col + 16, cols) << 4));
          }
        }
        auto* halves = reinterpret_cast<uint16_t*>(record + kCodeBytes);
        for (int64_t r = 0; r < kRows; ++r) {
          const int64_t index = (g * kRows + r) * blocks + b;
          halves[r] = _cvtss_sh(scale[index], 0);
          halves[kRows + r] = _cvtss_sh(offset[index], 0);
        }
      }
    }
  });
  return records;
}

// The float32 weights [out, in] the records stand for (a prefill chunk's dense product, tests).
at::Tensor w4_unpack(const at::Tensor& records, int64_t out_features, int64_t in_features) {
  check_records(records, out_features, in_features);
  const int64_t blocks = in_features / kBlock;
  at::Tensor weights = at::empty({out_features, in_features}, records.options().dtype(at::kFloat));
  const uint8_t* src = records.data_ptr<uint8_t>();
  float* dst = weights.data_ptr<float>();
  at::parallel_for(0, out_features / kRows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* record = src + (g * blocks + b) * kRecord;
        const auto* halves = reinterpret_cast<const uint16_t*>(record + kCodeBytes);
        for (int64_t v = 0; v < 4; ++v) {
          for (int64_t i = 0; i < 32; ++i) {
            const int64_t r = i / 4;
            const float scale = _cvtsh_ss(halves[r]);
            const float offset = _cvtsh_ss(halves[kRows + r]);
            float* row = dst + (g * kRows + r) * in_features + b * kBlock;
            const uint8_t byte = record[32 * v + i];
            row[4 * v + i % 4] = static_cast<float>(byte & 0x0F) * scale + offset;
            row[4 * v + i % 4 + 16] = static_cast<float>(byte >> 4) * scale + offset;
          }
        }
      }
    }
  });
  return weights;
}

// x [rows, in] float32; records as w4_pack made them for [out, in] weights.
at::Tensor w4a8_linear(const at::Tensor& x, const at::Tensor& records) {
  const int64_t out_features = records.size(0) * kRows;
  const int64_t in_features = records.size(1) * kBlock;
  check_records(records, out_features, in_features);
  check_activations(x, in_features);
  const int64_t rows = x.size(0);
  at::Tensor out = at::empty({rows, out_features}, x.options());
  if (rows == 0) return out;
  const QuantizedRows xq = quantize_rows(x.data_ptr<float>(), rows, in_features);
  run_w4(xq, rows, in_features, records.data_ptr<uint8_t>(), out.data_ptr<float>(),
         out_features);
  return out;
}

// x [rows, in] float32; weights [out, in] int8; row_scales [out] float32.
at::Tensor w8a8_block_linear(const at::Tensor& x, const at::Tensor& weights,
                             const at::Tensor& row_scales) {
  TORCH_CHECK(weights.dim() == 2 && weights.scalar_type() == at::kChar && weights.is_contiguous(),
              "weights must be a contiguous 2-d int8 tensor");
  const int64_t out_features = weights.size(0);
  const int64_t in_features = weights.size(1);
  check_activations(x, in_features);
  TORCH_CHECK(row_scales.scalar_type() == at::kFloat && row_scales.is_contiguous() &&
                  row_scales.dim() == 1 && row_scales.size(0) == out_features,
              "row_scales must be a contiguous float32 [out_features]");
  const int64_t rows = x.size(0);
  at::Tensor out = at::empty({rows, out_features}, x.options());
  if (rows == 0) return out;
  const QuantizedRows xq = quantize_rows(x.data_ptr<float>(), rows, in_features);
  run_w8(xq, rows, in_features, weights.data_ptr<int8_t>(), row_scales.data_ptr<float>(),
               out.data_ptr<float>(), out_features);
  return out;
}

// The activations as the products see them: each block of 32 rounded to 8 bits (tests).
at::Tensor quantize_activations(const at::Tensor& x) {
  check_activations(x, x.size(1));
  const int64_t rows = x.size(0);
  const int64_t cols = x.size(1);
  const QuantizedRows xq = quantize_rows(x.data_ptr<float>(), rows, cols);
  at::Tensor out = at::empty_like(x);
  float* dst = out.data_ptr<float>();
  for (int64_t i = 0; i < rows * cols; ++i) dst[i] = xq.scales[i / kBlock] * xq.codes[i];
  return out;
}

}  // namespace

TORCH_LIBRARY(ragguard, m) {
  m.def("w4_pack(Tensor q, Tensor scales, Tensor offsets) -> Tensor");
  m.def("w4_unpack(Tensor records, int out_features, int in_features) -> Tensor");
  m.def("w4a8_linear(Tensor x, Tensor records) -> Tensor");
  m.def("w8a8_block_linear(Tensor x, Tensor weights, Tensor row_scales) -> Tensor");
  m.def("quantize_activations(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(ragguard, CPU, m) {
  m.impl("w4_pack", &w4_pack);
  m.impl("w4_unpack", &w4_unpack);
  m.impl("w4a8_linear", &w4a8_linear);
  m.impl("w8a8_block_linear", &w8a8_block_linear);
  m.impl("quantize_activations", &quantize_activations);
}
