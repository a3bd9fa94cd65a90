// The traits table: one row per type id squeeze knows (ggml's and its own), and the kernel
// tables per ISA.
#include "formats/format.h"

#include <array>
#include <cctype>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/kernel_list.h"
#include "formats/sq.h"

namespace squeeze::formats {
namespace {

// Tables are indexed by slot: ggml's ids 0..63 as they are, then squeeze's 1000..1008.
constexpr uint32_t kGgmlIds = 64;  // ggml ids at or above this are unknown
constexpr uint32_t kSqFirstId = static_cast<uint32_t>(DType::SQ2_G32);
constexpr uint32_t kSqIds = static_cast<uint32_t>(DType::SQ4_G128) - kSqFirstId + 1;
constexpr uint32_t kSp8Id = static_cast<uint32_t>(DType::SP8_50);
constexpr uint32_t kSlots = kGgmlIds + kSqIds + 1;

// The slot of a type id, or kSlots for an unknown one.
constexpr uint32_t slot(uint32_t id) {
  if (id < kGgmlIds) return id;
  if (id >= kSqFirstId && id - kSqFirstId < kSqIds) return kGgmlIds + (id - kSqFirstId);
  if (id == kSp8Id) return kGgmlIds + kSqIds;
  return kSlots;
}
constexpr uint32_t slot(DType type) { return slot(static_cast<uint32_t>(type)); }

// Block size and bytes are ggml's (ggml-common.h); vec_dot_type is ggml's CPU pairing. The sq
// formats (sq.h): one block per group of G, 4 + G * B / 8 bytes, Q8_1 activations (like Q4_1).
constexpr FormatInfo kFormats[] = {
    // {type, name, elements per block, bytes per block, supported, vec_dot_type}
    {DType::F32, "f32", 1, 4, true, DType::F32},
    {DType::F16, "f16", 1, 2, true, DType::F16},
    {DType::BF16, "bf16", 1, 2, true, DType::BF16},
    {DType::Q4_0, "q4_0", 32, 18, true, DType::Q8_0},
    {DType::Q4_1, "q4_1", 32, 20, true, DType::Q8_1},
    {DType::Q5_0, "q5_0", 32, 22, true, DType::Q8_0},
    {DType::Q5_1, "q5_1", 32, 24, true, DType::Q8_1},
    {DType::Q8_0, "q8_0", 32, 34, true, DType::Q8_0},
    {DType::Q8_1, "q8_1", 32, 36, true, DType::Q8_1},
    {DType::Q4_K, "q4_K", 256, 144, true, DType::Q8_K},
    {DType::Q6_K, "q6_K", 256, 210, true, DType::Q8_K},
    {DType::Q8_K, "q8_K", 256, 292, true, DType::Q8_K},
    {DType::SQ2_G32, "sq2_g32", 32, 12, true, DType::Q8_1},
    {DType::SQ2_G64, "sq2_g64", 64, 20, true, DType::Q8_1},
    {DType::SQ2_G128, "sq2_g128", 128, 36, true, DType::Q8_1},
    {DType::SQ3_G32, "sq3_g32", 32, 16, true, DType::Q8_1},
    {DType::SQ3_G64, "sq3_g64", 64, 28, true, DType::Q8_1},
    {DType::SQ3_G128, "sq3_g128", 128, 52, true, DType::Q8_1},
    {DType::SQ4_G32, "sq4_g32", 32, 20, true, DType::Q8_1},
    {DType::SQ4_G64, "sq4_g64", 64, 36, true, DType::Q8_1},
    {DType::SQ4_G128, "sq4_g128", 128, 68, true, DType::Q8_1},
    {DType::SP8_50, "sp8_50", 32, 22, true, DType::Q8_0},
    // Known to ggml, not supported here.
    {DType::Q2_K, "q2_K", 256, 84, false, DType::Q8_K},
    {DType::Q3_K, "q3_K", 256, 110, false, DType::Q8_K},
    {DType::Q5_K, "q5_K", 256, 176, false, DType::Q8_K},
    {DType::IQ2_XXS, "iq2_xxs", 256, 66, false, DType::Q8_K},
    {DType::IQ2_XS, "iq2_xs", 256, 74, false, DType::Q8_K},
    {DType::IQ3_XXS, "iq3_xxs", 256, 98, false, DType::Q8_K},
    {DType::IQ1_S, "iq1_s", 256, 50, false, DType::Q8_K},
    {DType::IQ4_NL, "iq4_nl", 32, 18, false, DType::Q8_0},
    {DType::IQ3_S, "iq3_s", 256, 110, false, DType::Q8_K},
    {DType::IQ2_S, "iq2_s", 256, 82, false, DType::Q8_K},
    {DType::IQ4_XS, "iq4_xs", 256, 136, false, DType::Q8_K},
    {DType::I8, "i8", 1, 1, false, DType::I8},
    {DType::I16, "i16", 1, 2, false, DType::I16},
    {DType::I32, "i32", 1, 4, false, DType::I32},
    {DType::I64, "i64", 1, 8, false, DType::I64},
    {DType::F64, "f64", 1, 8, false, DType::F64},
    {DType::IQ1_M, "iq1_m", 256, 56, false, DType::Q8_K},
    {DType::TQ1_0, "tq1_0", 256, 54, false, DType::Q8_K},
    {DType::TQ2_0, "tq2_0", 256, 66, false, DType::Q8_K},
    {DType::MXFP4, "mxfp4", 32, 17, false, DType::Q8_0},
    {DType::NVFP4, "nvfp4", 64, 36, false, DType::Q8_0},
    {DType::Q1_0, "q1_0", 128, 18, false, DType::Q8_0},
};

using InfoIndex = std::array<const FormatInfo*, kSlots>;

InfoIndex make_info_index() {
  InfoIndex index{};
  for (const FormatInfo& info : kFormats) index[slot(info.type)] = &info;
  return index;
}

const InfoIndex& info_index() {
  static const InfoIndex index = make_info_index();
  return index;
}

using KernelTable = std::array<Kernels, kSlots>;

void set(KernelTable& t, DType type, Kernels k) { t[slot(type)] = k; }

// Calls f(type) for each of the nine sq formats.
template <typename F>
void for_each_sq(F f) {
  for (int bits : {2, 3, 4}) {
    for (int64_t group : {32, 64, 128}) f(sq_type(bits, group));
  }
}

KernelTable make_scalar_table() {
  KernelTable t{};
  using namespace scalar;
  set(t, DType::F32, {dequantize_f32, quantize_f32, vec_dot_f32});
  set(t, DType::F16, {dequantize_f16, quantize_f16, vec_dot_f16});
  set(t, DType::BF16, {dequantize_bf16, quantize_bf16, vec_dot_bf16});
  set(t, DType::Q4_0, {dequantize_q4_0, quantize_q4_0, vec_dot_q4_0});
  set(t, DType::Q4_1, {dequantize_q4_1, quantize_q4_1, vec_dot_q4_1});
  set(t, DType::Q5_0, {dequantize_q5_0, quantize_q5_0, vec_dot_q5_0});
  set(t, DType::Q5_1, {dequantize_q5_1, quantize_q5_1, vec_dot_q5_1});
  set(t, DType::Q8_0, {dequantize_q8_0, quantize_q8_0, vec_dot_q8_0});
  set(t, DType::Q8_1, {dequantize_q8_1, quantize_q8_1, nullptr});
  set(t, DType::Q4_K, {dequantize_q4_k, quantize_q4_k, vec_dot_q4_k});
  set(t, DType::Q6_K, {dequantize_q6_k, quantize_q6_k, vec_dot_q6_k});
  set(t, DType::Q8_K, {dequantize_q8_k, quantize_q8_k, nullptr});
  // Weight quantizers: the reference ones, which equal quantize_row except for Q8_0.
  for (DType w : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                  DType::Q5_1, DType::Q4_K, DType::Q6_K}) {
    t[slot(w)].quantize_row_ref = t[slot(w)].quantize_row;
  }
  t[slot(DType::Q8_0)].quantize_row_ref = quantize_q8_0_ref;
  t[slot(DType::Q4_0)].vec_dot_repacked = vec_dot_q4_0_repacked;
  t[slot(DType::Q4_K)].vec_dot_repacked = vec_dot_q4_k_repacked;
  t[slot(DType::Q4_K)].gemm_repacked = gemm_q4_k_repacked;
  t[slot(DType::Q4_K)].gemm = gemm_q4_k;
  t[slot(DType::Q6_K)].gemm = gemm_q6_k;
  for_each_sq([&](DType type) { sq_kernels(type, t[slot(type)]); });
  set(t, DType::SP8_50, {dequantize_sp8_50, quantize_sp8_50, vec_dot_sp8_50});
  t[slot(DType::SP8_50)].quantize_row_ref = quantize_sp8_50;
  return t;
}

// Starts from the scalar table and replaces what has an AVX2 version.
KernelTable make_avx2_table() {
  KernelTable t = make_scalar_table();
#if SQUEEZE_HAVE_AVX2_KERNELS
  auto at = [&](DType type) -> Kernels& { return t[slot(type)]; };
  using namespace avx2;
  at(DType::F32).vec_dot = vec_dot_f32;
  at(DType::F16) = {dequantize_f16, quantize_f16, vec_dot_f16};
  at(DType::BF16) = {dequantize_bf16, quantize_bf16, vec_dot_bf16};
  at(DType::Q4_0).dequantize_row = dequantize_q4_0;
  at(DType::Q4_0).vec_dot = vec_dot_q4_0;
  at(DType::Q4_1).dequantize_row = dequantize_q4_1;
  at(DType::Q4_1).vec_dot = vec_dot_q4_1;
  at(DType::Q5_0).dequantize_row = dequantize_q5_0;
  at(DType::Q5_0).vec_dot = vec_dot_q5_0;
  at(DType::Q5_1).dequantize_row = dequantize_q5_1;
  at(DType::Q5_1).vec_dot = vec_dot_q5_1;
  at(DType::Q8_0) = {dequantize_q8_0, quantize_q8_0, vec_dot_q8_0};
  at(DType::Q8_1).dequantize_row = dequantize_q8_1;
  at(DType::Q8_1).quantize_row = quantize_q8_1;
  at(DType::Q4_K).dequantize_row = dequantize_q4_k;
  at(DType::Q4_K).vec_dot = vec_dot_q4_k;
  at(DType::Q6_K).dequantize_row = dequantize_q6_k;
  at(DType::Q6_K).vec_dot = vec_dot_q6_k;
  at(DType::Q8_K).dequantize_row = dequantize_q8_k;
  at(DType::Q8_K).quantize_row = quantize_q8_k;
  for_each_sq([&](DType type) { sq_kernels(type, at(type)); });
  // The whole-entry assignments above dropped quantize_row_ref: weights stay scalar.
  const KernelTable scalar = make_scalar_table();
  for (size_t i = 0; i < t.size(); ++i) t[i].quantize_row_ref = scalar[i].quantize_row_ref;
  at(DType::Q4_0).vec_dot_repacked = vec_dot_q4_0_repacked;
  at(DType::Q4_K).vec_dot_repacked = vec_dot_q4_k_repacked;
  at(DType::Q4_K).gemm_repacked = gemm_q4_k_repacked;
  at(DType::Q4_K).gemm = gemm_q4_k;
  at(DType::Q6_K).gemm = gemm_q6_k;
  at(DType::Q4_0).gemm = gemm_q4_0;
  at(DType::Q4_0).gemm_repacked = gemm_q4_0_repacked;
  at(DType::Q4_1).gemm = gemm_q4_1;
  at(DType::Q5_0).gemm = gemm_q5_0;
  at(DType::Q8_0).gemm = gemm_q8_0;
  at(DType::F16).gemm = gemm_f16;
  for_each_sq([&](DType type) { at(type).gemm = sq_gemm(type); });
  at(DType::SP8_50).vec_dot = vec_dot_sp8_50;
  at(DType::SP8_50).gemm = gemm_sp8_50;
#endif
  return t;
}

// The AVX2 table with the tiled integer products replaced by their AVX-512 VNNI versions.
KernelTable make_avx512_table() {
  KernelTable t = make_avx2_table();
#if SQUEEZE_HAVE_AVX2_KERNELS
  auto at = [&](DType type) -> Kernels& { return t[slot(type)]; };
  using namespace avx512;
  at(DType::Q4_0).gemm_repacked = gemm_q4_0_repacked;
  at(DType::Q4_1).gemm = gemm_q4_1;
  at(DType::Q5_0).gemm = gemm_q5_0;
  at(DType::Q8_0).gemm = gemm_q8_0;
  at(DType::Q4_K).gemm_repacked = gemm_q4_k_repacked;
  at(DType::Q6_K).gemm = gemm_q6_k;
  // Q8_0 sums in block order on this tier and the AMX tier (as Q4_0's repacked order: its
  // vec_dot_repacked), decode included, so that a row gives the same bits in any batch and on
  // both tiers; llama.cpp's 8 lanes per block cost the tiles (AMX's, and these 4 x 4 ones)
  // their speed.
  at(DType::Q8_0).vec_dot_repacked = scalar::vec_dot_q8_0_blocks;
  at(DType::Q8_0).own_order = true;
  at(DType::Q8_0).gemm_repacked = gemm_q8_0_blocks;
  at(DType::F16).gemm = gemm_f16;
  for_each_sq([&](DType type) { at(type).gemm = sq_gemm(type); });
  if (cpu_has_avx512_vbmi2()) at(DType::SP8_50).gemm = gemm_sp8_50;  // else AVX2's
#endif
  return t;
}

// The AVX-512 table with the batched products of Q4_0 and Q8_0 on AMX int8 tiles and of F16 on
// bf16 tiles.
KernelTable make_amx_table() {
  KernelTable t = make_avx512_table();
#if SQUEEZE_HAVE_AVX2_KERNELS
  t[slot(DType::Q4_0)].gemm_repacked = amx::gemm_q4_0_repacked;
  t[slot(DType::Q4_0)].batch_repacked = {amx::q8_0_group_bytes, amx::prepare_q8_0_groups,
                                         amx::gemm_q4_0_batch};
  t[slot(DType::Q8_0)].gemm_repacked = amx::gemm_q8_0_blocks;
  t[slot(DType::Q8_0)].batch_repacked = {amx::q8_0_group_bytes, amx::prepare_q8_0_groups,
                                         amx::gemm_q8_0_batch};
  t[slot(DType::F16)].gemm = amx::gemm_f16;
  t[slot(DType::F16)].batch = {amx::f16_group_bytes, amx::prepare_f16, amx::gemm_f16_batch};
#endif
  return t;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

const FormatInfo* format_info(uint32_t type_id) {
  const uint32_t s = slot(type_id);
  return s == kSlots ? nullptr : info_index()[s];
}

const FormatInfo& format_info(DType type) {
  const FormatInfo* info = format_info(static_cast<uint32_t>(type));
  if (info == nullptr) {
    throw FormatError("unknown tensor type id " + std::to_string(static_cast<uint32_t>(type)));
  }
  return *info;
}

const FormatInfo* format_by_name(std::string_view name) {
  const std::string wanted = lower(name);
  for (const FormatInfo& info : kFormats) {
    if (lower(info.name) == wanted) return &info;
  }
  return nullptr;
}

size_t row_bytes(DType type, int64_t n) {
  const FormatInfo& info = format_info(type);
  if (n < 0 || n % info.block_size != 0) {
    throw FormatError("a row of " + std::to_string(n) + " elements is not a whole number of " +
                      std::string(info.name) + " blocks (" + std::to_string(info.block_size) +
                      " elements each)");
  }
  return static_cast<size_t>(n / info.block_size) * info.block_bytes;
}

const Kernels& kernels(DType type, Isa isa) {
  const FormatInfo& info = format_info(type);
  if (!info.supported) throw FormatError("unsupported tensor format " + std::string(info.name));
  if (!cpu_supports(isa)) {
    throw UsageError(std::string(isa_name(isa)) + " kernels asked for on a CPU without " +
                     std::string(isa_name(isa)));
  }
  static const KernelTable scalar_table = make_scalar_table();
  static const KernelTable avx2_table = make_avx2_table();
  static const KernelTable avx512_table = make_avx512_table();
  static const KernelTable amx_table = make_amx_table();
  const KernelTable& table = isa == Isa::Amx      ? amx_table
                             : isa == Isa::Avx512 ? avx512_table
                             : isa == Isa::Avx2   ? avx2_table
                                                  : scalar_table;
  return table[slot(type)];
}

void* scratch_buffer(size_t bytes) {
  struct Buffer {
    std::vector<unsigned char> bytes;
    void* aligned(size_t n) {
      if (bytes.size() < n + 64) bytes.resize(n + 64);
      const auto p = reinterpret_cast<uintptr_t>(bytes.data());
      return bytes.data() + ((64 - p % 64) % 64);
    }
  };
  thread_local Buffer buffer;
  return buffer.aligned(bytes);
}

}  // namespace squeeze::formats
