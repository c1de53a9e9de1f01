// Decode kernels (M = 1..16 rows of A) for com.microsoft::MatMulNBits that read
// ONNX Runtime's layout as it is handed over:
//   A [M, K] of T, B uint8 [N, k_blocks, blob], scales [N, k_blocks] (T or
//   fp32), zero points uint8 (int4: two blocks a byte, even block in the low
//   nibble; int8: one a byte), Y [M, N] of T.
// Decode is a pass over the weights, so the kernels are built to keep DRAM
// busy: every weight byte is loaded once, 16 bytes a lane, with the next
// k step's loads in flight while the current one is dequantised (tensor
// cores: cp.async into a shared-memory ring, so the bytes in flight hold no
// registers; fp32: into registers).
//
// fp16 / bf16 (NBITS_ACT 0 / 1): tensor cores, mma.m16n8k16 with the weights
// as the A operand (16 output columns x 16 k, row-major is ORT's K-contiguous
// rows) and the activations as B (8 batch rows per n8 tile). A dot product
// does not care about the order of k, so lane (g = lane / 4, t = lane % 4)
// loads whole 16-byte chunks of a row: chunk r of a k step at byte offset
// (4r + t) * 16, i.e. 32 int4 (16 int8) consecutive codes of rows g and g + 8
// of a 16-column tile. Each 32-bit word feeds the k slots a lane holds in one
// (int8) or two (int4) mmas, in the pair order the magic-number conversion
// produces; the activations are permuted to the same order, so no weight
// repacking is needed. By default (NBITS_EXACT) the mma multiplies the exact
// codes q - zp and the block scale is applied to its fp32 result, so weights
// are never rounded to T (see kExact). The warps of a CTA split K (warp w takes
// steps w, w + warps, ...) over NBITS_TILES 16-column tiles, or with
// NBITS_COL_WARPS c > 1 the CTA's columns into c parts of NBITS_TILES tiles
// and K over warps / c, and meet in shared memory; a CTA loops over column
// groups blockIdx.x, + gridDim.x, ... with the next group's first loads in
// flight across the boundary (with NBITS_CLUSTER_K > 1 a thread block
// cluster takes each group, its CTAs splitting K).
//
// fp32 (NBITS_ACT 2): CUDA cores. A warp owns NBITS_COLS_PER_WARP adjacent
// columns over all of K, lane l the 16-byte chunk l of each 32-chunk step;
// codes become floats by the 0x4B000000 magic number and are accumulated with
// FFMA per block, then scaled.
//
// Launch, block 32 * NBITS_WARPS threads:
//   tensor cores: grid = C * min(ceil(N / (16 * NBITS_TILES * NBITS_COL_WARPS)), SMs * NBITS_MIN_BLOCKS / C),
//     C = NBITS_CLUSTER_K (any grid >= 1 that C divides is correct: a cluster takes every
//     (gridDim.x / C)-th column group); M <= 8 * NBITS_M_TILES (M = 1 with NBITS_SINGLE_ROW);
//     C * NBITS_WARPS / NBITS_COL_WARPS <= ceil(K / k_step),
//     k_step = 128 codes (int4) or 64 (int8) times NBITS_CHUNKS (a static_assert checks);
//     dynamic shared memory sizeof(TcShared) = 16-byte rounded sum of
//       warps * NBITS_STAGES * (sets * tiles * chunks * 2 * 512 + act + meta)  (the cp.async rings)
//       2 * sets * tiles * m_tiles * 4 * warps * 32 * 4                  (partial sums)
//       2 * (rms ? warps * 8 * m_tiles : 1) * 4                          (RMS squares)
//     (less traps), act = 0, or with NBITS_STAGE_ACTS the staged rows of A:
//     k_step * 2 at M = 1, else 8 * m_tiles * (k_step * 2 + 8 * codes a 32-bit word holds);
//     meta = 0, or with NBITS_STAGE_META the step's scales and zero points: sets * tiles * chunks * 2 * 128.
//   fp32: grid = ceil(N / (NBITS_WARPS * NBITS_COLS_PER_WARP)); M <= NBITS_MAX_M; no dynamic shared memory.
// Pointer alignment (bytes) the loads need is noted at each parameter: a and
// gamma 16, b 16 (8 suffices for int4 block 16 with an odd block count),
// scales 8 (4-scale loads when k_blocks is a multiple of the blocks a chunk
// index spans; fp32 scales 4), zero points 4, bias and y the element size.

#include "nbits/half.cuh"
#include "nbits/reduce.cuh"

// ------------------------------------------------------------ configuration
#ifndef NBITS_ACT  // activation, output and bias type: 0 fp16, 1 bf16, 2 fp32
#define NBITS_ACT 0
#endif
#ifndef NBITS_SCALE_F32  // 1: scales are fp32; 0: scales have the activation type
#define NBITS_SCALE_F32 0
#endif
#ifndef NBITS_BITS  // 4 or 8
#define NBITS_BITS 4
#endif
#ifndef NBITS_BLOCK_SIZE  // power of two >= 16
#define NBITS_BLOCK_SIZE 32
#endif
#ifndef NBITS_K
#define NBITS_K 4096
#endif
#ifndef NBITS_HAS_ZP  // 0: symmetric (zero point 8 for int4, 128 for int8)
#define NBITS_HAS_ZP 0
#endif
#ifndef NBITS_BIAS  // 0 none, 1 y = T(acc + bias), 2 folded: y = T(T(acc) + bias)
#define NBITS_BIAS 0
#endif
#ifndef NBITS_RMSNORM  // 1: A is RMS-normalised with gamma first
#define NBITS_RMSNORM 0
#endif
#ifndef NBITS_GAMMA_F32  // 1: gamma is fp32; 0: gamma has the activation type
#define NBITS_GAMMA_F32 0
#endif
#ifndef NBITS_WARPS  // warps per CTA
#define NBITS_WARPS 8
#endif
#ifndef NBITS_MIN_BLOCKS  // __launch_bounds__ minimum CTAs per SM (register cap)
#define NBITS_MIN_BLOCKS 2
#endif
#ifndef NBITS_TILES  // tensor cores: 16-column tiles per CTA
#define NBITS_TILES 2
#endif
#ifndef NBITS_COL_WARPS  // tensor cores: warps across a CTA's column tiles (the others split K), 1, 2 or 4
#define NBITS_COL_WARPS 1
#endif
#ifndef NBITS_CLUSTER_K  // tensor cores: CTAs of a thread block cluster splitting each column group's K (1, 2, 4)
#define NBITS_CLUSTER_K 1
#endif
#ifndef NBITS_M_TILES  // tensor cores: 8-row batch tiles (1: M <= 8, 2: M <= 16)
#define NBITS_M_TILES 1
#endif
#ifndef NBITS_SINGLE_ROW  // tensor cores, 1: M = 1, so the batch rows 1..7 of an n8 tile are not accumulated
#define NBITS_SINGLE_ROW 0
#endif
#ifndef NBITS_CHUNKS  // tensor cores: 16-byte chunks per lane and row in a k step
#define NBITS_CHUNKS 1
#endif
#ifndef NBITS_COLS_PER_WARP  // fp32: columns per warp
#define NBITS_COLS_PER_WARP 4
#endif
#ifndef NBITS_MAX_M  // fp32: rows of A compiled in
#define NBITS_MAX_M 1
#endif
#ifndef NBITS_L2_PREFETCH  // weight loads: L2 prefetch size hint, 0, 64, 128 or 256 bytes
#define NBITS_L2_PREFETCH 128
#endif

#ifndef NBITS_STAGE_ACTS  // tensor cores, 1: the rows of A go through the cp.async ring with the weights
#define NBITS_STAGE_ACTS 0
#endif

#ifndef NBITS_EARLY_ACTS  // tensor cores, 1: a k step's rows of A are loaded before its weights are waited for
#define NBITS_EARLY_ACTS 0
#endif

#ifndef NBITS_PROGRAMMATIC  // 1: launched as a programmatic dependent of the previous kernel (sm_90+), see tc_run
#define NBITS_PROGRAMMATIC 0
#endif
#ifndef NBITS_PREFETCH_FIRST  // 1 (with NBITS_PROGRAMMATIC): L2 prefetch of the first group's first k steps, see tc_run
#define NBITS_PREFETCH_FIRST 0
#endif
#if NBITS_PROGRAMMATIC && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "NBITS_PROGRAMMATIC needs griddepcontrol (compute capability 9.0 and newer)"
#endif
#if NBITS_PREFETCH_FIRST && !NBITS_PROGRAMMATIC
#error "NBITS_PREFETCH_FIRST prefetches while a programmatic launch waits (NBITS_PROGRAMMATIC)"
#endif
#if NBITS_CLUSTER_K > 1 && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "NBITS_CLUSTER_K needs thread block clusters (compute capability 9.0 and newer)"
#endif
// The CTAs of a cluster are consecutive along x.
#if NBITS_CLUSTER_K > 1
#define NBITS_DECODE_CLUSTER __cluster_dims__(NBITS_CLUSTER_K, 1, 1)
#else
#define NBITS_DECODE_CLUSTER
#endif

#if NBITS_L2_PREFETCH == 64
#define NBITS_DECODE_L2_HINT ".L2::64B"
#elif NBITS_L2_PREFETCH == 128
#define NBITS_DECODE_L2_HINT ".L2::128B"
#elif NBITS_L2_PREFETCH == 256
#define NBITS_DECODE_L2_HINT ".L2::256B"
#else
#define NBITS_DECODE_L2_HINT ""
#endif

#if NBITS_ACT == 0
typedef __half act_t;
#elif NBITS_ACT == 1
typedef __nv_bfloat16 act_t;
#else
typedef float act_t;
#endif
#if NBITS_SCALE_F32
typedef float scale_t;
#else
typedef act_t scale_t;
#endif
#if NBITS_GAMMA_F32
typedef float gamma_t;
#else
typedef act_t gamma_t;
#endif

namespace nbits_decode {

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;

template <bool C, class A, class B> struct Select { typedef A type; };
template <class A, class B> struct Select<false, A, B> { typedef B type; };

__host__ __device__ constexpr int ilog2(int v) { return v <= 1 ? 0 : 1 + ilog2(v / 2); }
__host__ __device__ constexpr int pow2_divisor(int bytes, int cap)
{
    return (bytes % cap == 0) ? cap : pow2_divisor(bytes, cap / 2);
}

constexpr bool kF32 = NBITS_ACT == 2;
constexpr bool kBf16 = NBITS_ACT == 1;
constexpr bool kScaleF32 = NBITS_SCALE_F32 != 0 || NBITS_ACT == 2;
constexpr bool kGammaF32 = NBITS_GAMMA_F32 != 0 || kF32;
constexpr int kActBytes = kF32 ? 4 : 2;
constexpr int kBits = NBITS_BITS;
constexpr int kBlock = NBITS_BLOCK_SIZE;
constexpr int kBlockShift = ilog2(kBlock);
constexpr int kK = NBITS_K;
constexpr bool kHasZp = NBITS_HAS_ZP != 0;
constexpr int kBiasMode = NBITS_BIAS;
constexpr bool kRms = NBITS_RMSNORM != 0;
constexpr int kWarps = NBITS_WARPS;
constexpr int kThreads = 32 * kWarps;

constexpr int kKBlocks = (kK + kBlock - 1) / kBlock;
constexpr int kRowCodes = kKBlocks * kBlock;  // K padded to whole blocks
constexpr int kRowBytes = kRowCodes * kBits / 8;
constexpr int kZpRowBytes = kBits == 4 ? (kKBlocks + 1) / 2 : kKBlocks;
constexpr int kChunkCodes = 128 / kBits;  // codes in 16 bytes
constexpr int kWordCodes = 32 / kBits;    // codes in a 32-bit word
constexpr int kPairs = kWordCodes / 2;    // T pairs a word dequantises to
constexpr int kBlocksPerChunk = kChunkCodes > kBlock ? kChunkCodes / kBlock : 1;
constexpr int kWordsPerBlock = 4 / kBlocksPerChunk;  // words of a chunk sharing one scale
// Rows start 16-byte aligned unless int4 block 16 has an odd block count.
constexpr bool kRowAligned16 = kRowBytes % 16 == 0;
// Widest load a row of A allows (rows start at multiples of K elements).
constexpr int kActAlign = pow2_divisor(kK * kActBytes, 16);
constexpr u32 kDefaultZp = kBits == 4 ? 8u : 128u;

static_assert(kBits == 4 || kBits == 8, "NBITS_BITS is 4 or 8");
static_assert(kBlock >= 16 && (kBlock & (kBlock - 1)) == 0, "block size: a power of two >= 16");
static_assert(kK > 0, "NBITS_K > 0");
static_assert(kBiasMode >= 0 && kBiasMode <= 2, "NBITS_BIAS is 0, 1 or 2");
static_assert(sizeof(gamma_t) == (kGammaF32 ? 4 : 2), "gamma type");

#if NBITS_SCALE_F32 || NBITS_ACT == 2
typedef float scale_raw_t;
#else
typedef u16 scale_raw_t;
#endif

// ------------------------------------------------------------ memory access
// Weights are read once: keep them out of L1 so the activations stay there.
__device__ __forceinline__ uint4 ld_weights16(const u8* p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate" NBITS_DECODE_L2_HINT ".v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ uint2 ld_weights8(const u8* p)
{
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];"
                 : "=r"(v.x), "=r"(v.y)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ uint4 ld_v4(const void* p)
{
    uint4 v;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ uint2 ld_v2(const void* p)
{
    uint2 v;
    asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}

__device__ __forceinline__ u32 ld_u32(const void* p)
{
    u32 v;
    asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ u32 ld_u16(const void* p)
{
    u16 v;
    asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ u32 ld_u8(const void* p)
{
    u32 v;
    asm volatile("ld.global.nc.u8 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ float ld_f32(const void* p)
{
    float v;
    asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}

// Scales and zero points: a few bytes of a row whose next bytes the row's
// next k steps read, by other warps of the CTA a step later; each read pulls
// the 256 aligned bytes around it into L2, so those find them there instead
// of each waiting on DRAM (the scales of a step arriving after its weights
// stalled the M = 1 kernels on their conversion).
template <class T>
__device__ __forceinline__ T ld_meta(const void* p);
template <>
__device__ __forceinline__ uint2 ld_meta<uint2>(const void* p)
{
    uint2 v;
    asm volatile("ld.global.nc.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}
template <>
__device__ __forceinline__ u32 ld_meta<u32>(const void* p)
{
    u32 v;
    asm volatile("ld.global.nc.L2::256B.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
template <>
__device__ __forceinline__ u16 ld_meta<u16>(const void* p)
{
    u16 v;
    asm volatile("ld.global.nc.L2::256B.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}
template <>
__device__ __forceinline__ u8 ld_meta<u8>(const void* p)
{
    u32 v;
    asm volatile("ld.global.nc.L2::256B.u8 %0, [%1];" : "=r"(v) : "l"(p));
    return (u8)v;
}
template <>
__device__ __forceinline__ float ld_meta<float>(const void* p)
{
    float v;
    asm volatile("ld.global.nc.L2::256B.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}

// BYTES (4, 8 or 16) contiguous bytes into 32-bit words, with loads no wider
// than ALIGN bytes.
template <int BYTES, int ALIGN>
__device__ __forceinline__ void ld_words(const void* p, u32 (&out)[BYTES / 4])
{
    const char* c = static_cast<const char*>(p);
    if constexpr (ALIGN >= 16 && BYTES == 16) {
        const uint4 v = ld_v4(c);
        out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
    } else if constexpr (ALIGN >= 8 && BYTES >= 8) {
#pragma unroll
        for (int i = 0; i < BYTES / 8; ++i) {
            const uint2 v = ld_v2(c + 8 * i);
            out[2 * i] = v.x; out[2 * i + 1] = v.y;
        }
    } else if constexpr (ALIGN >= 4) {
#pragma unroll
        for (int i = 0; i < BYTES / 4; ++i) {
            out[i] = ld_u32(c + 4 * i);
        }
    } else {
#pragma unroll
        for (int i = 0; i < BYTES / 4; ++i) {
            out[i] = ld_u16(c + 4 * i) | (ld_u16(c + 4 * i + 2) << 16);
        }
    }
}

__device__ __forceinline__ u32 word_of(const uint4& v, int w)
{
    return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
}

// 16 bytes of a row at chunk start k0. Rows that are only 8-byte aligned
// (int4 block 16 with an odd block count) take two loads; in the tail step
// the second half may lie past the padded row.
template <bool TAIL>
__device__ __forceinline__ uint4 load_chunk(const u8* p, int k0)
{
    if constexpr (kRowAligned16) {
        return ld_weights16(p);
    } else {
        uint4 v;
        const uint2 lo = ld_weights8(p);
        v.x = lo.x; v.y = lo.y; v.z = 0u; v.w = 0u;
        if (!TAIL || k0 + kChunkCodes / 2 < kRowCodes) {
            const uint2 hi = ld_weights8(p + 8);
            v.z = hi.x; v.w = hi.y;
        }
        return v;
    }
}

// ------------------------------------------------------------ conversions
// (a & mask) | magic
__device__ __forceinline__ u32 lop_and_or(u32 a, u32 mask, u32 magic)
{
    u32 d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(mask), "r"(magic));
    return d;
}

template <bool BF16>
__device__ __forceinline__ u32 pack2(float lo, float hi)
{
    u32 d;
    if constexpr (BF16) {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    } else {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    }
    return d;
}

template <bool BF16>
__device__ __forceinline__ float lo_float(u32 v)
{
    if constexpr (BF16) {
        return __uint_as_float(v << 16);
    } else {
        float f;
        asm("{.reg .f16 l, h; mov.b32 {l, h}, %1; cvt.f32.f16 %0, l;}" : "=f"(f) : "r"(v));
        return f;
    }
}

template <bool BF16>
__device__ __forceinline__ float hi_float(u32 v)
{
    if constexpr (BF16) {
        return __uint_as_float(v & 0xffff0000u);
    } else {
        float f;
        asm("{.reg .f16 l, h; mov.b32 {l, h}, %1; cvt.f32.f16 %0, h;}" : "=f"(f) : "r"(v));
        return f;
    }
}

template <bool BF16>
__device__ __forceinline__ float bits_to_float(u32 bits16)
{
    return lo_float<BF16>(bits16);
}

template <bool BF16>
__device__ __forceinline__ u16 float_to_bits(float f)
{
    u16 h;
    if constexpr (BF16) {
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    } else {
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    }
    return h;
}

template <bool BF16>
__device__ __forceinline__ u32 psub(u32 a, u32 b)
{
    u32 d;
    if constexpr (BF16) {
#if __CUDA_ARCH__ >= 900
        asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(b), "r"(0xbf80bf80u), "r"(a));
#endif
    } else {
        asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    }
    return d;
}

template <bool BF16>
__device__ __forceinline__ u32 pmul(u32 a, u32 b)
{
    u32 d;
    if constexpr (BF16) {
#if __CUDA_ARCH__ >= 900
        asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
#endif
    } else {
        asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    }
    return d;
}

__device__ __forceinline__ u32 pfma_f16(u32 a, u32 b, u32 c)
{
    u32 d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// One scale of a block as a T pair.
template <bool BF16>
__device__ __forceinline__ u32 scale_pair(scale_raw_t s)
{
    if constexpr (kScaleF32) {
        return pack2<BF16>(s, s);
    } else {
        return (u32)s * 0x10001u;
    }
}

// Dequantisation of one 32-bit word of a row into the T pairs the mma takes,
// each (q - zp) * scale. The subtraction is exact (integers), so the only
// rounding is the product, as in a T dequantisation.
//   int4 (8 codes k0..k7): pairs (k0,k4), (k1,k5), (k2,k6), (k3,k7)
//   int8 (4 codes k0..k3): pairs (k0,k1), (k2,k3)
template <bool BF16, int BITS>
struct Dequant;

// fp16 int4: 0x6400 | n is 1024 + n; the high nibble of each byte, left in
// place, is 1024 + 16 n, which one fma by 1/16 brings to n - zp exactly.
template <>
struct Dequant<false, 4> {
    u32 scale, zero_lo, zero_hi;
    __device__ __forceinline__ void set(u32 scale2, u32 zp)
    {
        scale = scale2;
        zero_lo = (0x6400u + zp) * 0x10001u;         // 1024 + zp
        zero_hi = (0xd400u | (zp << 4)) * 0x10001u;  // -(64 + zp)
    }
    __device__ __forceinline__ void word(u32 q, u32 (&w)[4]) const
    {
        const u32 q8 = q >> 8;
        w[0] = pmul<false>(psub<false>(lop_and_or(q, 0x000f000fu, 0x64006400u), zero_lo), scale);
        w[1] = pmul<false>(pfma_f16(lop_and_or(q, 0x00f000f0u, 0x64006400u), 0x2c002c00u, zero_hi), scale);
        w[2] = pmul<false>(psub<false>(lop_and_or(q8, 0x000f000fu, 0x64006400u), zero_lo), scale);
        w[3] = pmul<false>(pfma_f16(lop_and_or(q8, 0x00f000f0u, 0x64006400u), 0x2c002c00u, zero_hi), scale);
    }
};

// bf16 int4: 0x4300 | n is 128 + n (7 mantissa bits, so each nibble is moved
// to bit 0 first).
template <>
struct Dequant<true, 4> {
    u32 scale, zero_lo;
    __device__ __forceinline__ void set(u32 scale2, u32 zp)
    {
        scale = scale2;
        zero_lo = (0x4300u + zp) * 0x10001u;  // 128 + zp
    }
    __device__ __forceinline__ void word(u32 q, u32 (&w)[4]) const
    {
        w[0] = pmul<true>(psub<true>(lop_and_or(q, 0x000f000fu, 0x43004300u), zero_lo), scale);
        w[1] = pmul<true>(psub<true>(lop_and_or(q >> 4, 0x000f000fu, 0x43004300u), zero_lo), scale);
        w[2] = pmul<true>(psub<true>(lop_and_or(q >> 8, 0x000f000fu, 0x43004300u), zero_lo), scale);
        w[3] = pmul<true>(psub<true>(lop_and_or(q >> 12, 0x000f000fu, 0x43004300u), zero_lo), scale);
    }
};

// fp16 int8: byte b next to 0x64 is 1024 + b.
template <>
struct Dequant<false, 8> {
    u32 scale, zero_lo;
    __device__ __forceinline__ void set(u32 scale2, u32 zp)
    {
        scale = scale2;
        zero_lo = (0x6400u + zp) * 0x10001u;
    }
    __device__ __forceinline__ void word(u32 q, u32 (&w)[2]) const
    {
        w[0] = pmul<false>(psub<false>(__byte_perm(q, 0x64646464u, 0x4140), zero_lo), scale);
        w[1] = pmul<false>(psub<false>(__byte_perm(q, 0x64646464u, 0x4342), zero_lo), scale);
    }
};

// bf16 int8: 8 mantissa bits cannot hold 128 + b, so through fp32
// (0x4B000000 | b is 2^23 + b); q - zp is exact in bf16.
template <>
struct Dequant<true, 8> {
    u32 scale;
    float zero;
    __device__ __forceinline__ void set(u32 scale2, u32 zp)
    {
        scale = scale2;
        zero = 8388608.0f + (float)zp;
    }
    __device__ __forceinline__ void word(u32 q, u32 (&w)[2]) const
    {
        const float f0 = __uint_as_float(__byte_perm(q, 0x4b000000u, 0x7440)) - zero;
        const float f1 = __uint_as_float(__byte_perm(q, 0x4b000000u, 0x7441)) - zero;
        const float f2 = __uint_as_float(__byte_perm(q, 0x4b000000u, 0x7442)) - zero;
        const float f3 = __uint_as_float(__byte_perm(q, 0x4b000000u, 0x7443)) - zero;
        w[0] = pmul<true>(pack2<true>(f0, f1), scale);
        w[1] = pmul<true>(pack2<true>(f2, f3), scale);
    }
};

// Exact dequantisation (exact mode): the same pairs as Dequant, q - zp
// without the scale, which is applied to the mma result in fp32.
template <bool BF16, int BITS>
struct Codes;

template <>
struct Codes<false, 4> {
    u32 zero_lo, zero_hi;
    __device__ __forceinline__ void set(u32 zp)
    {
        zero_lo = (0x6400u + zp) * 0x10001u;
        zero_hi = (0xd400u | (zp << 4)) * 0x10001u;
    }
    // The zero point is byte `byte` (0..3, below 16) of v: one byte permute
    // spreads it into both halves of 0x6400 + zp, and zero_hi's halves
    // 0xd400 + 16 zp follow by one multiply-add (the low half's carry into
    // the high half is folded into the constant).
    __device__ __forceinline__ void set_byte(u32 v, int byte)
    {
        zero_lo = __byte_perm(v, 0x64u, (u32)byte * 0x0101u + 0x4040u);
        zero_hi = zero_lo * 16u + 0x93fa9400u;
    }
    __device__ __forceinline__ void word(u32 q, u32 (&w)[4]) const
    {
        const u32 q8 = q >> 8;
        w[0] = psub<false>(lop_and_or(q, 0x000f000fu, 0x64006400u), zero_lo);
        w[1] = pfma_f16(lop_and_or(q, 0x00f000f0u, 0x64006400u), 0x2c002c00u, zero_hi);
        w[2] = psub<false>(lop_and_or(q8, 0x000f000fu, 0x64006400u), zero_lo);
        w[3] = pfma_f16(lop_and_or(q8, 0x00f000f0u, 0x64006400u), 0x2c002c00u, zero_hi);
    }
};

template <>
struct Codes<true, 4> {
    u32 zero_lo;
    __device__ __forceinline__ void set(u32 zp) { zero_lo = (0x4300u + zp) * 0x10001u; }
    __device__ __forceinline__ void set_byte(u32 v, int byte)
    {
        zero_lo = __byte_perm(v, 0x43u, (u32)byte * 0x0101u + 0x4040u);
    }
    __device__ __forceinline__ void word(u32 q, u32 (&w)[4]) const
    {
        w[0] = psub<true>(lop_and_or(q, 0x000f000fu, 0x43004300u), zero_lo);
        w[1] = psub<true>(lop_and_or(q >> 4, 0x000f000fu, 0x43004300u), zero_lo);
        w[2] = psub<true>(lop_and_or(q >> 8, 0x000f000fu, 0x43004300u), zero_lo);
        w[3] = psub<true>(lop_and_or(q >> 12, 0x000f000fu, 0x43004300u), zero_lo);
    }
};

template <>
struct Codes<false, 8> {
    u32 zero_lo;
    __device__ __forceinline__ void set(u32 zp) { zero_lo = (0x6400u + zp) * 0x10001u; }
    __device__ __forceinline__ void set_byte(u32 v, int byte)
    {
        zero_lo = __byte_perm(v, 0x64u, (u32)byte * 0x0101u + 0x4040u);
    }
    __device__ __forceinline__ void word(u32 q, u32 (&w)[2]) const
    {
        w[0] = psub<false>(__byte_perm(q, 0x64646464u, 0x4140), zero_lo);
        w[1] = psub<false>(__byte_perm(q, 0x64646464u, 0x4342), zero_lo);
    }
};

template <>
struct Codes<true, 8> {
    float zero;
    __device__ __forceinline__ void set(u32 zp) { zero = 8388608.0f + (float)zp; }
    // 2^23 + zp, the zero point's byte under the float magic number's exponent.
    __device__ __forceinline__ void set_byte(u32 v, int byte)
    {
        zero = __uint_as_float(__byte_perm(v, 0x4b000000u, (u32)byte + 0x7440u));
    }
    __device__ __forceinline__ void word(u32 q, u32 (&w)[2]) const
    {
        const float f0 = __uint_as_float(__byte_perm(q, 0x4b000000u, 0x7440)) - zero;
        const float f1 = __uint_as_float(__byte_perm(q, 0x4b000000u, 0x7441)) - zero;
        const float f2 = __uint_as_float(__byte_perm(q, 0x4b000000u, 0x7442)) - zero;
        const float f3 = __uint_as_float(__byte_perm(q, 0x4b000000u, 0x7443)) - zero;
        w[0] = pack2<true>(f0, f1);
        w[1] = pack2<true>(f2, f3);
    }
};

// Offset codes (NBITS_OFFSET_CODES, int4 in exact mode): the word's pairs
// as the magic number leaves them, bf16 128 + q and fp16 1024 + q (high
// nibbles, which one fma by 1/16 brings down anyway, q), with no zero point
// subtracted; the block's fp32 result takes minus the offset times the sum
// of its activations instead (see OffsetOperand), as the mma accumulator's
// start or added after the block's mmas, so the weights stay exact and a word
// costs no subtraction.
template <bool BF16>
struct OffsetCodes;

// (A template over the pair count only so that int8 kernels, which never
// call it, compile the call.)
template <>
struct OffsetCodes<false> {
    template <int N>
    __device__ __forceinline__ static void word(u32 q, u32 (&w)[N])
    {
        static_assert(N == 4, "int4: four pairs a word");
        const u32 q8 = q >> 8;
        w[0] = lop_and_or(q, 0x000f000fu, 0x64006400u);
        w[1] = pfma_f16(lop_and_or(q, 0x00f000f0u, 0x64006400u), 0x2c002c00u, 0xd400d400u);
        w[2] = lop_and_or(q8, 0x000f000fu, 0x64006400u);
        w[3] = pfma_f16(lop_and_or(q8, 0x00f000f0u, 0x64006400u), 0x2c002c00u, 0xd400d400u);
    }
};

template <>
struct OffsetCodes<true> {
    template <int N>
    __device__ __forceinline__ static void word(u32 q, u32 (&w)[N])
    {
        static_assert(N == 4, "int4: four pairs a word");
        w[0] = lop_and_or(q, 0x000f000fu, 0x43004300u);
        w[1] = lop_and_or(q >> 4, 0x000f000fu, 0x43004300u);
        w[2] = lop_and_or(q >> 8, 0x000f000fu, 0x43004300u);
        w[3] = lop_and_or(q >> 12, 0x000f000fu, 0x43004300u);
    }
};

// The constant A operand of the mma that takes the offset's share of a block
// from its activations x (B): registers a0, a1 (rows g, g + 8, the k slots
// of low nibbles) and a2, a3 (rows g, g + 8, high nibbles), each a T pair.
// Symmetric (zero point 8), rows g and g + 8 alike: the block's accumulator
// starts at -(offset + 8) sum x over low nibbles, -8 sum x over high nibbles
// for fp16 (whose high nibbles carry no offset). With zero points, row g
// gives -sum x and row g + 8 the offset's part, -offset sum x (fp16: over low
// nibbles), and each weight row's start is zp * (row g) + (row g + 8).
template <bool BF16>
struct OffsetOperand;

template <>
struct OffsetOperand<false> {
    static constexpr u32 kSymLo = 0xe408e408u;   // -1032
    static constexpr u32 kSymHi = 0xc800c800u;   // -8
    static constexpr u32 kMinusOne = 0xbc00bc00u;
    static constexpr u32 kOffsetLo = 0xe400e400u;  // -1024
    static constexpr u32 kOffsetHi = 0u;
};

template <>
struct OffsetOperand<true> {
    static constexpr u32 kSymLo = 0xc308c308u;  // -136
    static constexpr u32 kSymHi = 0xc308c308u;
    static constexpr u32 kMinusOne = 0xbf80bf80u;
    static constexpr u32 kOffsetLo = 0xc300c300u;  // -128
    static constexpr u32 kOffsetHi = 0xc300c300u;
};

// The word's codes as floats q - zp (exact), in k order.
__device__ __forceinline__ void dequant_word_f32(u32 q, float zero_magic, float (&d)[kWordCodes])
{
#pragma unroll
    for (int i = 0; i < kWordCodes; ++i) {
        u32 bits;
        if constexpr (kBits == 4) {
            bits = lop_and_or(q >> (4 * i), 0xfu, 0x4b000000u);
        } else {
            bits = __byte_perm(q, 0x4b000000u, 0x7440 | i);
        }
        d[i] = __uint_as_float(bits) - zero_magic;
    }
}

// Zero point of block `blk` from its raw byte.
__device__ __forceinline__ u32 zero_point_of(u32 raw, int blk)
{
    if constexpr (!kHasZp) {
        return kDefaultZp;
    } else if constexpr (kBits == 4) {
        return (raw >> ((blk & 1) * 4)) & 0xfu;
    } else {
        return raw;
    }
}

// Zero-point byte offset of block `blk` in a row.
__device__ __forceinline__ int zero_point_byte(int blk)
{
    return kBits == 4 ? (blk >> 1) : blk;
}

// One block scale; HINTED (the tensor-core kernels): through ld_meta. The fp32
// kernels' loads were not measured with the hint and keep the plain one.
template <bool HINTED>
__device__ __forceinline__ scale_raw_t load_scale(const scale_raw_t* p)
{
    if constexpr (kScaleF32) {
        return HINTED ? ld_meta<float>(p) : ld_f32(p);
    } else {
        return (scale_raw_t)(HINTED ? (u32)ld_meta<u16>(p) : ld_u16(p));
    }
}

// One weight set: lane-relative base pointers (row n0 + row_of_lane).
struct Weights {
    const u8* b;
    const scale_raw_t* s;
    const u8* z;
};

// Runs compute(frag, step) for step = first, first + stride, ... < count,
// with the loads of the following step already issued: two fragments
// alternate so that no registers are copied.
template <class Frag, class Load, class Compute>
__device__ __forceinline__ void pipelined_steps(
    int first, int stride, int count, Frag& f0, Frag& f1, Load load, Compute compute)
{
    int s = first;
    if (s < count) {
        load(f0, s);
    }
#pragma unroll 1
    for (; s < count; s += 2 * stride) {
        const int s1 = s + stride;
        if (s1 < count) {
            load(f1, s1);
        }
        compute(f0, s);
        if (s1 >= count) {
            break;
        }
        if (s1 + stride < count) {
            load(f0, s1 + stride);
        }
        compute(f1, s1);
    }
}

__device__ __forceinline__ float silu(float x)
{
    return x / (1.0f + expf(-x));
}

// Final rounding of one output: bias (plain or folded) and T.
template <bool BF16>
__device__ __forceinline__ u16 round_output(float v, const u16* bias, long long bias_index)
{
    if constexpr (kBiasMode == 1) {
        v += bits_to_float<BF16>(ld_u16(bias + bias_index));
    } else if constexpr (kBiasMode == 2) {
        v = bits_to_float<BF16>(float_to_bits<BF16>(v)) + bits_to_float<BF16>(ld_u16(bias + bias_index));
    }
    return float_to_bits<BF16>(v);
}

__device__ __forceinline__ float round_output_f32(float v, const float* bias, long long bias_index)
{
    if constexpr (kBiasMode != 0) {
        v += ld_f32(bias + bias_index);
    }
    return v;
}

__device__ __forceinline__ float inv_rms(float sum_squares, float epsilon)
{
    return rsqrtf(sum_squares / (float)kK + epsilon);
}

#if NBITS_ACT != 2
// ============================================================ tensor cores
constexpr int kTiles = NBITS_TILES;
constexpr int kMTiles = NBITS_M_TILES;
constexpr int kChunks = NBITS_CHUNKS;
constexpr bool kSingleRow = NBITS_SINGLE_ROW != 0;
// Warps across the columns: the NBITS_COL_WARPS warps of one k step read the
// same activations, so all but the first find them in L1, and a CTA's column
// group grows without more accumulators a warp (at M = 9..16 every CTA reads
// all of A, twice the weights' bytes of a 32-column group).
constexpr int kColWarps = NBITS_COL_WARPS;
constexpr int kKWarps = kWarps / kColWarps;  // warps splitting K
constexpr int kWarpCols = 16 * kTiles;
constexpr int kCtaCols = kWarpCols * kColWarps;
static_assert(kColWarps == 1 || kColWarps == 2 || kColWarps == 4, "NBITS_COL_WARPS is 1, 2 or 4");
// A cluster of kClusterK CTAs takes one column group at a time, its CTAs'
// warps splitting K together (kSplitWarps in all) and summing their partials
// through distributed shared memory: a node with fewer groups than CTA slots
// puts kClusterK times the CTAs to work on them.
constexpr int kClusterK = NBITS_CLUSTER_K;
constexpr int kSplitWarps = kClusterK * kKWarps;
static_assert(kClusterK == 1 || kClusterK == 2 || kClusterK == 4, "NBITS_CLUSTER_K is 1, 2 or 4");
static_assert(kWarps % kColWarps == 0, "NBITS_WARPS is a multiple of NBITS_COL_WARPS");
constexpr int kStepCodes = 4 * kChunks * kChunkCodes;
constexpr int kStepBytes = 64 * kChunks;
constexpr int kFullSteps = kK / kStepCodes;
constexpr bool kHasTail = kK % kStepCodes != 0;

static_assert(kMTiles == 1 || kMTiles == 2, "NBITS_M_TILES is 1 or 2");
static_assert(!kSingleRow || kMTiles == 1, "NBITS_SINGLE_ROW needs NBITS_M_TILES 1");

template <bool BF16>
__device__ __forceinline__ void mma_16816(float (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1)
{
    if constexpr (BF16) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
}

// Exact mode: the mma multiplies (q - zp), exact in T, and each 16 x 16 mma
// lies inside one quantisation block, so the scale is applied to the fp32
// result; the weights are never rounded. For that the four chunks of a quad
// are read back from shared memory transposed (ldmatrix): lane t holds word t
// of each of the quad's four chunks, and word slot s of every lane belongs to
// chunk 4r + s, i.e. to one block. Needs every 16-byte chunk inside one block:
// int8 always, int4 from block 32 on. int4 block 16 scales each word instead.
#ifndef NBITS_EXACT  // 0: scale the weights in T before the mma (fewer instructions, T-rounded weights)
#define NBITS_EXACT 1
#endif
constexpr bool kExact = NBITS_EXACT && (kBits == 8 || kBlock >= 32);
#ifndef NBITS_OFFSET_CODES  // int4 exact mode multiplies offset codes (see OffsetCodes), 1: the block's mma
#define NBITS_OFFSET_CODES 0  // accumulator starts at the offset's share, 2: it is added after the block's mmas
#endif
constexpr bool kOffsetCodes = NBITS_OFFSET_CODES && kExact && kBits == 4;
constexpr bool kOffsetAfter = kOffsetCodes && NBITS_OFFSET_CODES == 2;
// Word slots that share a block (exact mode).
constexpr int kSlotsPerBlock = kBlock / kChunkCodes >= 4 ? 4 : (kBlock / kChunkCodes >= 2 ? 2 : 1);
// Scales (and zero points) a row needs per chunk index r.
constexpr int kScalesPerChunk = kExact ? 4 / kSlotsPerBlock : kBlocksPerChunk;
constexpr int kSteps = kFullSteps + (kHasTail ? 1 : 0);
static_assert(kSteps >= kSplitWarps,
              "every warp needs a k step: NBITS_CLUSTER_K * NBITS_WARPS / NBITS_COL_WARPS <= ceil(K / k step)");
#ifndef NBITS_STAGES  // k steps of weights in flight per warp: a cp.async ring in shared memory
#define NBITS_STAGES 2
#endif
constexpr int kStages = NBITS_STAGES;
static_assert(kStages >= 2 && kStages <= 8, "NBITS_STAGES is 2..8");

// A row's scales of one chunk index are consecutive blocks blk0 .. blk0 +
// kScalesPerChunk - 1 with blk0 a multiple of kScalesPerChunk; when every
// row holds a multiple of kScalesPerChunk blocks they are read with one load
// (and their zero points with another) and kept packed: 16-bit scales two a
// register, zero-point bytes as read.
constexpr bool kPackedMeta = kKBlocks % kScalesPerChunk == 0;
constexpr int kScaleRegs = kScaleF32 ? kScalesPerChunk : (kScalesPerChunk + 1) / 2;
typedef typename Select<kScaleF32, float, u32>::type scale_reg_t;

// The scales and zero-point bytes of one k step's blocks, rows g and g + 8
// of each tile (the weights themselves are staged in shared memory).
template <int NSETS>
struct TcFrag {
    scale_reg_t s[NSETS][kTiles][2][kChunks][kScaleRegs];
    u32 z[NSETS][kTiles][2][kChunks];
};

// Scale i of a packed set (fp32 scales are not packed).
__device__ __forceinline__ float scale_at(const float (&s)[kScaleRegs], int i) { return s[i]; }
__device__ __forceinline__ u16 scale_at(const u32 (&s)[kScaleRegs], int i)
{
    return (u16)((s[i / 2] >> (16 * (i & 1))) & 0xffffu);
}
__device__ __forceinline__ void put_scale(float (&s)[kScaleRegs], int i, float v) { s[i] = v; }
__device__ __forceinline__ void put_raw(float (&s)[kScaleRegs], int i, u32 v) { s[i] = __uint_as_float(v); }
__device__ __forceinline__ void put_raw(u32 (&s)[kScaleRegs], int i, u32 v) { s[i] = v; }
__device__ __forceinline__ void put_scale(u32 (&s)[kScaleRegs], int i, u16 v) { s[i / 2] |= (u32)v << (16 * (i & 1)); }

// Zero point of block blk0 + i from the bytes read at zero_point_byte(blk0).
__device__ __forceinline__ u32 zero_point_at(u32 z, int blk0, int i)
{
    if constexpr (!kHasZp) {
        return kDefaultZp;
    } else if constexpr (kBits == 4) {
        const int blk = blk0 + i;
        return (z >> (8 * ((blk >> 1) - (blk0 >> 1)) + 4 * (blk & 1))) & 0xfu;
    } else {
        return (z >> (8 * i)) & 0xffu;
    }
}

// Zero point of block blk0 + i from the bytes read at zero_point_byte(blk0),
// as byte `byte` of `word` (for Codes::set_byte): int4 zero points are
// spread one a byte, low or high nibbles as the block's parity says. In exact
// mode blk0 is a multiple of kScalesPerChunk, so with several blocks a chunk
// index both are known at compile time.
struct ZeroPointByte {
    u32 word;
    int byte;
};
__device__ __forceinline__ ZeroPointByte zero_point_byte_at(u32 z, int blk0, int i)
{
    if constexpr (kBits == 8) {
        return {z, i};
    } else if constexpr (kScalesPerChunk == 1) {
        return {(z >> (4 * (blk0 & 1))) & 0xfu, 0};
    } else {
        return {(i & 1) ? (z >> 4) & 0x0f0f0f0fu : z & 0x0f0f0f0fu, i >> 1};
    }
}

// The zero point at byte `byte` of `word` as a float: 2^23 + zp under the
// float magic number's exponent, less 2^23.
__device__ __forceinline__ float zero_point_float(ZeroPointByte z)
{
    return __uint_as_float(__byte_perm(z.word, 0x4b000000u, (u32)z.byte + 0x7440u)) - 8388608.0f;
}

// N consecutive 16-bit scales, N * 2-byte aligned, two a register.
template <int N>
__device__ __forceinline__ void ld_packed_scales(const void* p, u32 (&v)[4])
{
    if constexpr (N == 4) {
        const uint2 x = ld_meta<uint2>(p);
        v[0] = x.x; v[1] = x.y;
    } else {
        v[0] = ld_meta<u32>(p);
    }
}

// Bytes of zero points the blocks blk0 .. blk0 + kScalesPerChunk - 1 span.
constexpr int kZpBytes = kBits == 8 ? kScalesPerChunk : (kScalesPerChunk + 1) / 2;

// Scales and zero-point bytes of one row and chunk index, blocks blk0 ...;
// `valid(i)` says whether block blk0 + i exists (the tail step).
template <bool TAIL, class Valid>
__device__ __forceinline__ void load_meta(
    const scale_raw_t* srow, const u8* zrow, int blk0, Valid valid, scale_reg_t (&s)[kScaleRegs], u32& z)
{
    if constexpr (!TAIL && kPackedMeta && !kScaleF32 && kScalesPerChunk > 1) {
        u32 v[4] = {0u, 0u, 0u, 0u};
        if (valid(0)) {
            ld_packed_scales<kScalesPerChunk>(srow + blk0, v);
        }
#pragma unroll
        for (int i = 0; i < kScaleRegs; ++i) put_raw(s, i, v[i]);
    } else {
#pragma unroll
        for (int i = 0; i < kScaleRegs; ++i) s[i] = 0;
#pragma unroll
        for (int i = 0; i < kScalesPerChunk; ++i) {
            if (valid(i)) {
                put_scale(s, i, load_scale<true>(srow + blk0 + i));
            }
        }
    }
    z = 0u;
    if constexpr (kHasZp) {
        const u8* zp = zrow + zero_point_byte(blk0);
        if constexpr (!TAIL && kPackedMeta && kZpBytes == 4) {
            if (valid(0)) z = ld_meta<u32>(zp);
        } else if constexpr (!TAIL && kPackedMeta && kZpBytes == 2) {
            if (valid(0)) z = ld_meta<u16>(zp);
        } else {
#pragma unroll
            for (int i = 0; i < kZpBytes; ++i) {
                const int first = kBits == 8 ? i : 2 * i - (blk0 & 1);  // first block in byte i
                if (valid(first < 0 ? 0 : first)) {
                    z |= (u32)ld_meta<u8>(zp + i) << (8 * i);
                }
            }
        }
    }
}

// The lane's view of A: rows 8 * mt + g, or none past M.
struct TcActs {
    const u16* row[kMTiles];
    bool ok[kMTiles];
    const void* gamma;
};

// ------------------------------------------------------------ staging
// Each warp owns kStages stages of shared memory; stage u holds one k step:
// per weight set, tile, row half h (rows g / g + 8) and chunk index r, a
// 512-byte slot of the 32 lanes' 16-byte chunks. Lane (g, t) writes its chunk
// to position 4 g + (t ^ ((g / 2) % 4)) of a slot: the XOR swizzle puts the
// eight rows of every ldmatrix matrix, and every 8-lane phase of the copies,
// in distinct banks. The copies are cp.async (global to shared, no
// registers), so kStages - 1 k steps stay in flight while one is computed.
constexpr int kSlotBytes = 32 * 16;
template <int NSETS>
__host__ __device__ constexpr int weight_stage_bytes() { return NSETS * kTiles * 2 * kChunks * kSlotBytes; }

// With NBITS_STAGE_ACTS a stage also holds the step's kStepCodes activations
// of each row of A (one row with NBITS_SINGLE_ROW, else the 8 of each batch
// tile), after the weights, copied in 16-byte pieces with them: the k step
// then waits on no load from L2 (a long K re-reads A from L2 in every CTA,
// where the activations of a step arrived only when it was computed). Rows
// lie kActRowStride apart: the four lanes of a quad read 8 * kWordCodes
// contiguous bytes of their row, so a stride of that much past a multiple of
// 128 bytes puts the rows of one shared-memory phase in distinct banks. Needs
// rows of whole 16-byte pieces (K % 8 == 0), so that a piece is either inside
// K or past it and zero-filled.
constexpr bool kStageActs = NBITS_STAGE_ACTS != 0;
static_assert(!kStageActs || (!kRms && kActAlign == 16),
              "NBITS_STAGE_ACTS needs no RMS-norm prologue and K % 8 == 0");
constexpr int kActRows = kSingleRow ? 1 : 8 * kMTiles;
constexpr int kActRowStride = kSingleRow ? kStepCodes * 2 : kStepCodes * 2 + 8 * kWordCodes;
constexpr int kActPiecesPerRow = kStepCodes * 2 / 16;
constexpr int kActStageBytes = kStageActs ? kActRows * kActRowStride : 0;
// With NBITS_STAGE_META a stage also holds the step's block scales and zero
// points, after the activations, copied with its weights instead of loaded
// into registers a step ahead (which cost the zero-point kernels the 128
// registers of two CTAs an SM and left their loads' latency exposed): per
// slot (set, tile, row half, chunk index) 8 rows of kMetaRowBytes: the
// row's scales of the chunk index (four, two or one: 8 or 4 bytes, one scale
// as the aligned 4-byte word holding it) and the aligned 4-byte word holding
// its zero points. Exact mode with 16-bit scales, rows of whole words of
// scales and of zero points.
#ifndef NBITS_STAGE_META
#define NBITS_STAGE_META 0
#endif
constexpr bool kStageMeta = NBITS_STAGE_META != 0;
static_assert(!kStageMeta || (kExact && !kScaleF32 && kKBlocks % (kScalesPerChunk == 4 ? 4 : 2) == 0 &&
                              (!kHasZp || kZpRowBytes % 4 == 0)),
              "NBITS_STAGE_META needs exact mode, 16-bit scales, K blocks a multiple of 4 (four scales a chunk "
              "index) or 2, and zero-point rows of whole words");
// Bytes of scales a staged row copies: its chunk index's scales, or the word holding its one scale.
constexpr int kMetaScaleBytes = kScalesPerChunk == 4 ? 8 : 4;
constexpr int kMetaRowBytes = 16;
template <int NSETS>
__host__ __device__ constexpr int meta_stage_bytes()
{
    return kStageMeta ? NSETS * kTiles * 2 * kChunks * 8 * kMetaRowBytes : 0;
}
template <int NSETS>
__host__ __device__ constexpr int stage_bytes()
{
    return weight_stage_bytes<NSETS>() + kActStageBytes + meta_stage_bytes<NSETS>();
}

__device__ __forceinline__ int slot_index(int set, int j, int h, int r)
{
    return ((set * kTiles + j) * 2 + h) * kChunks + r;
}

__device__ __forceinline__ int swizzled_position(int g, int t) { return 4 * g + (t ^ ((g >> 1) & 3)); }

// Shared address of row g's metadata of a slot in the stage at `stage` (NBITS_STAGE_META).
template <int NSETS>
__device__ __forceinline__ u32 meta_address_of(u32 stage, int slot, int g)
{
    return stage + (u32)(weight_stage_bytes<NSETS>() + kActStageBytes + (slot * 8 + g) * kMetaRowBytes);
}

__device__ __forceinline__ u32 shared_address(const void* p)
{
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// 16 (or 8) bytes global to shared address dst; bytes past src_bytes are
// zeros (src_bytes 0 reads nothing).
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global" NBITS_DECODE_L2_HINT " [%0], [%1], 16, %2;"
                 :
                 : "r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}

// The same through L1 (cp.async.ca), for data that other CTAs of the SM read
// again: the activation row.
__device__ __forceinline__ void cp_async16_l1(u32 dst, const void* src, int src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;" : : "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void cp_async8(u32 dst, const void* src, int src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" : : "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void cp_async4(u32 dst, const void* src, int src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" : : "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" : : : "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" : : "n"(N) : "memory"); }

__device__ __forceinline__ void ldmatrix_x4(u32 row, u32 (&q)[4])
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(q[0]), "=r"(q[1]), "=r"(q[2]), "=r"(q[3])
                 : "r"(row)
                 : "memory");
}

// BYTES (8 or 16) bytes of shared memory into 32-bit words.
template <int BYTES>
__device__ __forceinline__ void ld_shared_words(u32 address, u32 (&out)[BYTES / 4])
{
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "4, 8 or 16 bytes");
    if constexpr (BYTES == 16) {
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(out[0]), "=r"(out[1]), "=r"(out[2]), "=r"(out[3])
                     : "r"(address)
                     : "memory");
    } else if constexpr (BYTES == 8) {
        asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(out[0]), "=r"(out[1]) : "r"(address) : "memory");
    } else {
        asm volatile("ld.shared.u32 %0, [%1];" : "=r"(out[0]) : "r"(address) : "memory");
    }
}

__device__ __forceinline__ uint4 ld_shared16(u32 address)
{
    u32 w[4];
    ld_shared_words<16>(address, w);
    return uint4{w[0], w[1], w[2], w[3]};
}

// Shared address of chunk position `position` of slot `slot` in a stage.
__device__ __forceinline__ u32 chunk_address(u32 stage, int slot, int position)
{
    return stage + (u32)(16 * (32 * slot + position));
}

// Runs compute(frag, stage, j) for j = 0 .. count - 1 with the loads of items
// j + 1 .. j + kStages - 1 in flight, prepare(j) first, before item j is
// waited for (its register loads then wait together with the copies): load(frag, stage, j) issues item j's
// cp.async copies into `stage` and its metadata loads into `frag`, and every
// item is one cp.async group (empty past the end), so waiting until
// kStages - 1 groups are pending means item j has landed. The ring index is a
// compile-time constant in the unrolled body, so the fragments stay in
// registers.
template <class Frag, class Load, class Prepare, class Compute>
__device__ __forceinline__ void staged_steps(
    int count, Frag (&frags)[kStages], Load load, Prepare prepare, Compute compute)
{
#pragma unroll
    for (int u = 0; u < kStages - 1; ++u) {
        if (u < count) {
            load(frags[u], u, u);
        }
        cp_async_commit();
    }
#pragma unroll 1
    for (int j0 = 0; j0 < count; j0 += kStages) {
#pragma unroll
        for (int u = 0; u < kStages; ++u) {
            const int j = j0 + u;
            if (j < count) {
                prepare(j);
                const int next = (u + kStages - 1) % kStages;
                // Stage `next` held item j - 1, which every lane has read.
                __syncwarp();
                if (j + kStages - 1 < count) {
                    load(frags[next], next, j + kStages - 1);
                }
                cp_async_commit();
                cp_async_wait<kStages - 1>();
                __syncwarp();  // the other lanes' copies of item j are visible
                compute(frags[u], u, j);
            }
        }
    }
    cp_async_wait<0>();
}

// The chunk at p (code k0 of its row) into shared address dst, zeros where
// absent (a row past N, a chunk past K, the second half of an 8-byte-aligned
// row's last chunk). The caller passes B's first byte as an absent chunk's
// address, so that every address lies in B, though an absent chunk reads
// nothing.
template <bool TAIL>
__device__ __forceinline__ void stage_chunk(u32 dst, const u8* p, int k0, bool present)
{
    if constexpr (kRowAligned16) {
        cp_async16(dst, p, present ? 16 : 0);
    } else {
        const bool hi = present && (!TAIL || k0 + kChunkCodes / 2 < kRowCodes);
        cp_async8(dst, p, present ? 8 : 0);
        cp_async8(dst + 8, hi ? p + 8 : p, hi ? 8 : 0);
    }
}

// First block of scale slot i of chunk index r (lane-independent in exact
// mode; lane t's own chunk otherwise).
__device__ __forceinline__ int scale_block(int step, int r, int t, int i)
{
    if constexpr (kExact) {
        return (step * kStepCodes + (4 * r + i * kSlotsPerBlock) * kChunkCodes) >> kBlockShift;
    } else {
        return ((step * kStepCodes + (4 * r + t) * kChunkCodes) >> kBlockShift) + i;
    }
}

// Whether scale slot i exists (its first code is below K).
__device__ __forceinline__ bool scale_in_k(int step, int r, int t, int i)
{
    if constexpr (kExact) {
        return step * kStepCodes + (4 * r + i * kSlotsPerBlock) * kChunkCodes < kK;
    } else {
        return (step * kStepCodes + (4 * r + t) * kChunkCodes + i * kBlock) < kK;
    }
}

// Item `step` of a column group: its weights into `stage` (a shared
// address), its scales and zero points into f. FULL: every row of the group
// is below N (no row checks). Absent chunks read nothing, from the start of
// their set's B (`b`) so that every address stays inside it.
template <bool TAIL, bool FULL, int NSETS>
__device__ __forceinline__ void tc_load(TcFrag<NSETS>& f, u32 stage, const Weights (&w)[NSETS],
                                        const u8* const (&b)[NSETS], u32 rows_ok, int g, int t, int step)
{
#pragma unroll
    for (int r = 0; r < kChunks; ++r) {
        const int k0 = step * kStepCodes + (4 * r + t) * kChunkCodes;
        const bool chunk_ok = !TAIL || k0 < kK;
#pragma unroll
        for (int set = 0; set < NSETS; ++set) {
#pragma unroll
            for (int j = 0; j < kTiles; ++j) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = 16 * j + 8 * h;
                    const bool row_ok = FULL || ((rows_ok >> (2 * j + h)) & 1u);
                    const u8* p = w[set].b + (long long)row * kRowBytes + step * kStepBytes + r * 64;
                    if (!FULL || TAIL) {
                        p = row_ok && chunk_ok ? p : b[set];
                    }
                    stage_chunk<TAIL>(chunk_address(stage, slot_index(set, j, h, r), swizzled_position(g, t)), p, k0,
                                      row_ok && chunk_ok);
                    if constexpr (!kStageMeta) {
                        load_meta<TAIL>(w[set].s + row * kKBlocks, w[set].z + row * kZpRowBytes,
                            scale_block(step, r, t, 0),
                            [&](int i) { return row_ok && (!TAIL || scale_in_k(step, r, t, i)); },
                            f.s[set][j][h][r], f.z[set][j][h][r]);
                    }
                }
            }
        }
    }
    if constexpr (kStageMeta) {
        // Lane t of each quad copies its row's metadata of slots t, t + 4, ... (one weight set of one tile and
        // one chunk has only two slots).
        constexpr int kSlotsPerSet = kTiles * 2 * kChunks;
        constexpr int kSlots = NSETS * kSlotsPerSet;
#pragma unroll
        for (int q = 0; q < (kSlots + 3) / 4; ++q) {
            const int slot = 4 * q + t;
            if (kSlots % 4 != 0 && slot >= kSlots) {
                break;
            }
            const int set = NSETS == 1 ? 0 : slot / kSlotsPerSet;
            const int r = slot % kChunks;
            const int jh = (slot / kChunks) % (2 * kTiles);  // 2 j + h
            const int row = 8 * jh;
            const bool row_ok = FULL || ((rows_ok >> jh) & 1u);
            const int blk0 = scale_block(step, r, t, 0);
            const bool ok = row_ok && (!TAIL || scale_in_k(step, r, t, 0));
            // The set's pointers selected by value: where the set depends on the lane (two sets of two slots),
            // a selected reference would index w at run time and put it in local memory.
            const bool first = NSETS == 1 || set == 0;
            const scale_raw_t* set_scales = first ? w[0].s : w[NSETS - 1].s;
            const u8* set_zp = first ? w[0].z : w[NSETS - 1].z;
            const u32 at = meta_address_of<NSETS>(stage, slot, g);
            const scale_raw_t* s = set_scales + row * kKBlocks + (kScalesPerChunk == 1 ? blk0 & ~1 : blk0);
            if constexpr (kMetaScaleBytes == 8) {
                cp_async8(at, ok ? (const void*)s : (const void*)b[0], ok ? 8 : 0);
            } else {
                cp_async4(at, ok ? (const void*)s : (const void*)b[0], ok ? 4 : 0);
            }
            if constexpr (kHasZp) {
                const u8* z = set_zp + row * kZpRowBytes + (zero_point_byte(blk0) & ~3);
                cp_async4(at + 8, ok ? (const void*)z : (const void*)b[0], ok ? 4 : 0);
            }
        }
    }
}

// The activations of one word (k .. k + kWordCodes) of one A row as natural
// T pairs (k, k+1), ...; zeros past K in the tail step.
template <bool TAIL>
__device__ __forceinline__ void load_act_word(const u16* row, int k, u32 (&nat)[kPairs])
{
    if (!TAIL || k + kWordCodes <= kK) {
        ld_words<2 * kWordCodes, kActAlign>(row + k, nat);
    } else {
#pragma unroll
        for (int i = 0; i < kPairs; ++i) {
            const u32 lo = (k + 2 * i < kK) ? ld_u16(row + k + 2 * i) : 0u;
            const u32 hi = (k + 2 * i + 1 < kK) ? ld_u16(row + k + 2 * i + 1) : 0u;
            nat[i] = lo | (hi << 16);
        }
    }
}

// gamma[k .. k + kWordCodes) as floats (zeros past K).
template <bool TAIL>
__device__ __forceinline__ void load_gamma_word(const void* gamma, int k, float (&gm)[kWordCodes])
{
    if constexpr (kGammaF32) {
        const float* g = static_cast<const float*>(gamma);
        if (!TAIL || k + kWordCodes <= kK) {
#pragma unroll
            for (int h = 0; h < kWordCodes / 4; ++h) {
                u32 v[4];
                ld_words<16, 16>(g + k + 4 * h, v);
#pragma unroll
                for (int i = 0; i < 4; ++i) gm[4 * h + i] = __uint_as_float(v[i]);
            }
        } else {
#pragma unroll
            for (int i = 0; i < kWordCodes; ++i) gm[i] = (k + i < kK) ? ld_f32(g + k + i) : 0.0f;
        }
    } else {
        u32 nat[kPairs];
        load_act_word<TAIL>(static_cast<const u16*>(gamma), k, nat);
#pragma unroll
        for (int i = 0; i < kPairs; ++i) {
            gm[2 * i] = lo_float<kBf16>(nat[i]);
            gm[2 * i + 1] = hi_float<kBf16>(nat[i]);
        }
    }
}

// B operands of word slot w of chunk r: the activations at the k of that
// slot, in the pair order of the weights' words (zeros past M and K); with
// kStageActs from `staged`, their shared address in the step's stage.
template <bool TAIL>
__device__ __forceinline__ void load_b_word(
    const TcActs& act, int k, u32 staged, float (&ss)[kMTiles], u32 (&x)[kMTiles][kPairs])
{
    float gm[kWordCodes];
    if constexpr (kRms) {
        load_gamma_word<TAIL>(act.gamma, k, gm);
    }
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
        u32 nat[kPairs];
#pragma unroll
        for (int i = 0; i < kPairs; ++i) nat[i] = 0u;
        if (act.ok[mt]) {
            if constexpr (kStageActs) {
                ld_shared_words<2 * kWordCodes>(staged + (u32)(8 * mt * kActRowStride), nat);
            } else {
                load_act_word<TAIL>(act.row[mt], k, nat);
            }
        }
        if constexpr (kRms) {
#pragma unroll
            for (int i = 0; i < kPairs; ++i) {
                const float lo = lo_float<kBf16>(nat[i]);
                const float hi = hi_float<kBf16>(nat[i]);
                ss[mt] = fmaf(lo, lo, ss[mt]);
                ss[mt] = fmaf(hi, hi, ss[mt]);
                nat[i] = pack2<kBf16>(lo * gm[2 * i], hi * gm[2 * i + 1]);
            }
        }
        if constexpr (kBits == 4) {
            x[mt][0] = __byte_perm(nat[0], nat[2], 0x5410);  // (k0, k4)
            x[mt][1] = __byte_perm(nat[0], nat[2], 0x7632);  // (k1, k5)
            x[mt][2] = __byte_perm(nat[1], nat[3], 0x5410);  // (k2, k6)
            x[mt][3] = __byte_perm(nat[1], nat[3], 0x7632);  // (k3, k7)
        } else {
#pragma unroll
            for (int i = 0; i < kPairs; ++i) x[mt][i] = nat[i];
        }
    }
}

// Scale i of a packed set as a float, converted straight from its half of
// the register (no shift to isolate it first).
__device__ __forceinline__ float scale_float(const float (&s)[kScaleRegs], int i) { return s[i]; }
__device__ __forceinline__ float scale_float(const u32 (&s)[kScaleRegs], int i)
{
    return (i & 1) ? hi_float<kBf16>(s[i / 2]) : lo_float<kBf16>(s[i / 2]);
}

// Row g's staged scales and zero-point bytes of a slot (NBITS_STAGE_META), as
// load_meta would have kept them: the chunk index's 16-bit scales packed two
// a register, the zero-point bytes of block blk0 on at byte 0.
template <int NSETS>
__device__ __forceinline__ void load_staged_meta(u32 stage, int slot, int g, int blk0, u32 (&s)[kScaleRegs], u32& z)
{
    const u32 at = meta_address_of<NSETS>(stage, slot, g);
    ld_shared_words<kMetaScaleBytes>(at, s);
    if constexpr (kScalesPerChunk == 1) {
        s[0] = (blk0 & 1) ? s[0] >> 16 : s[0] & 0xffffu;  // the word's half that holds block blk0
    }
    if constexpr (kHasZp) {
        u32 word[1];
        ld_shared_words<4>(at + 8, word);
        z = word[0] >> (8 * (zero_point_byte(blk0) & 3));
    }
}
template <int NSETS>
__device__ __forceinline__ void load_staged_meta(u32, int, int, int, float (&)[kScaleRegs], u32&)
{
}

// The B operands of chunk index r of a k step, loaded (and normalised) once
// for every tile and weight set: word slot w holds, in exact mode, word t of
// chunk 4r + w (one block), else word w of the lane's own chunk 4r + t.
// `acts` is the shared address of the step's staged activations (kStageActs).
typedef u32 ChunkActs[4][kMTiles][kPairs];
template <bool TAIL>
__device__ __forceinline__ void tc_acts(
    ChunkActs& x, u32 acts, float (&ss)[kMTiles], const TcActs& act, int lane, int step, int r)
{
    const int t = lane & 3;
    const int k0 = step * kStepCodes + (kExact ? 4 * r * kChunkCodes + t * kWordCodes : (4 * r + t) * kChunkCodes);
    const int stride = kExact ? kChunkCodes : kWordCodes;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        const int k = k0 + w * stride;
        load_b_word<TAIL>(act, k, acts + (u32)((lane >> 2) * kActRowStride + 2 * (k - step * kStepCodes)), ss, x[w]);
    }
}

// With NBITS_EARLY_ACTS a k step's activations are loaded before the warp
// waits for its weights (tc_run's prepare), so that their trip to L2 overlaps
// the wait instead of following it; else each chunk's are loaded as it is
// computed, which holds fewer registers. Staged activations are in the stage.
constexpr bool kEarlyActs = NBITS_EARLY_ACTS != 0;
static_assert(!kEarlyActs || !kStageActs, "NBITS_EARLY_ACTS loads the rows of A that NBITS_STAGE_ACTS stages");

// One k step; `early` holds its activations with kEarlyActs.
template <bool TAIL, int NSETS>
__device__ __forceinline__ void tc_compute(
    const TcFrag<NSETS>& f, u32 stage, const ChunkActs* early, float (&acc)[NSETS][kTiles][kMTiles][4],
    float (&ss)[kMTiles], const TcActs& act, int lane, int step)
{
    const int t = lane & 3;
#pragma unroll
    for (int r = 0; r < kChunks; ++r) {
        ChunkActs loaded;
        if constexpr (!kEarlyActs) {
            tc_acts<TAIL>(loaded, stage + (u32)weight_stage_bytes<NSETS>(), ss, act, lane, step, r);
        }
        const ChunkActs& x = *(kEarlyActs ? &early[r] : &loaded);
        if constexpr (kExact) {
            // Offset codes: each block's mma of the constant operand over its activations, for every tile and set.
            float offset[kScalesPerChunk][kMTiles][4];
            if constexpr (kOffsetCodes) {
                typedef OffsetOperand<kBf16> Op;
                const u32 a0 = kHasZp ? Op::kMinusOne : Op::kSymLo;
                const u32 a1 = kHasZp ? Op::kOffsetLo : Op::kSymLo;
                const u32 a2 = kHasZp ? Op::kMinusOne : Op::kSymHi;
                const u32 a3 = kHasZp ? Op::kOffsetHi : Op::kSymHi;
#pragma unroll
                for (int i = 0; i < kScalesPerChunk; ++i)
#pragma unroll
                    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) offset[i][mt][e] = 0.0f;
#pragma unroll
                        for (int ws = 0; ws < kSlotsPerBlock; ++ws)
#pragma unroll
                            for (int p = 0; p < kPairs / 2; ++p)
                                mma_16816<kBf16>(offset[i][mt], a0, a1, a2, a3,
                                    x[i * kSlotsPerBlock + ws][mt][2 * p], x[i * kSlotsPerBlock + ws][mt][2 * p + 1]);
                    }
            }
#pragma unroll
            for (int set = 0; set < NSETS; ++set) {
#pragma unroll
                for (int j = 0; j < kTiles; ++j) {
                    // Rows g and g + 8, transposed by ldmatrix: matrix s of a slot is
                    // chunk s of rows 0..7 (lane l gives row l % 8 of matrix l / 8), so
                    // lane (g, t) receives word t of chunk 4r + s in register s.
                    u32 qa[4], qb[4];
                    const int rr = lane & 7;
                    const int matrix_row = swizzled_position(rr, lane >> 3);
                    ldmatrix_x4(chunk_address(stage, slot_index(set, j, 0, r), matrix_row), qa);
                    ldmatrix_x4(chunk_address(stage, slot_index(set, j, 1, r), matrix_row), qb);
                    const int blk0 = scale_block(step, r, t, 0);
                    // Rows g and g + 8: scales and zero-point bytes as load_meta keeps them.
                    scale_reg_t s_lo[kScaleRegs], s_hi[kScaleRegs];
                    u32 z_lo = 0u, z_hi = 0u;
                    if constexpr (kStageMeta) {
                        load_staged_meta<NSETS>(stage, slot_index(set, j, 0, r), lane >> 2, blk0, s_lo, z_lo);
                        load_staged_meta<NSETS>(stage, slot_index(set, j, 1, r), lane >> 2, blk0, s_hi, z_hi);
                    } else {
#pragma unroll
                        for (int q = 0; q < kScaleRegs; ++q) {
                            s_lo[q] = f.s[set][j][0][r][q];
                            s_hi[q] = f.s[set][j][1][r][q];
                        }
                        z_lo = f.z[set][j][0][r];
                        z_hi = f.z[set][j][1][r];
                    }
#pragma unroll
                    for (int i = 0; i < kScalesPerChunk; ++i) {
                        Codes<kBf16, kBits> ca, cb;
                        float c[kMTiles][4];
                        float start[kMTiles][4];  // the offset's share of rows g and g + 8
                        if constexpr (kOffsetCodes) {
                            // Elements 1 and 3 hold the odd batch rows. The share starts the mma's accumulator,
                            // or with kOffsetAfter is added after the block's mmas.
                            float za = 0.0f, zb = 0.0f;
                            if constexpr (kHasZp) {
                                za = zero_point_float(zero_point_byte_at(z_lo, blk0, i));
                                zb = zero_point_float(zero_point_byte_at(z_hi, blk0, i));
                            }
#pragma unroll
                            for (int mt = 0; mt < kMTiles; ++mt) {
                                const float(&o)[4] = offset[i][mt];
                                if constexpr (kHasZp) {
                                    start[mt][0] = fmaf(za, o[0], o[2]);
                                    start[mt][2] = fmaf(zb, o[0], o[2]);
                                    start[mt][1] = kSingleRow ? 0.0f : fmaf(za, o[1], o[3]);
                                    start[mt][3] = kSingleRow ? 0.0f : fmaf(zb, o[1], o[3]);
                                } else {
                                    start[mt][0] = o[0];
                                    start[mt][2] = o[0];
                                    start[mt][1] = kSingleRow ? 0.0f : o[1];
                                    start[mt][3] = kSingleRow ? 0.0f : o[1];
                                }
#pragma unroll
                                for (int e = 0; e < 4; ++e) c[mt][e] = kOffsetAfter ? 0.0f : start[mt][e];
                            }
                        } else {
                            if constexpr (kHasZp) {
                                const ZeroPointByte za = zero_point_byte_at(z_lo, blk0, i);
                                const ZeroPointByte zb = zero_point_byte_at(z_hi, blk0, i);
                                ca.set_byte(za.word, za.byte);
                                cb.set_byte(zb.word, zb.byte);
                            } else {
                                ca.set(kDefaultZp);
                                cb.set(kDefaultZp);
                            }
#pragma unroll
                            for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
                                for (int e = 0; e < 4; ++e) c[mt][e] = 0.0f;
                        }
#pragma unroll
                        for (int ws = 0; ws < kSlotsPerBlock; ++ws) {
                            const int w = i * kSlotsPerBlock + ws;
                            u32 wa[kPairs], wb[kPairs];
                            if constexpr (kOffsetCodes) {
                                OffsetCodes<kBf16>::word(qa[w], wa);
                                OffsetCodes<kBf16>::word(qb[w], wb);
                            } else {
                                ca.word(qa[w], wa);
                                cb.word(qb[w], wb);
                            }
#pragma unroll
                            for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
                                for (int p = 0; p < kPairs / 2; ++p)
                                    mma_16816<kBf16>(c[mt], wa[2 * p], wb[2 * p], wa[2 * p + 1], wb[2 * p + 1],
                                        x[w][mt][2 * p], x[w][mt][2 * p + 1]);
                        }
                        if constexpr (kOffsetAfter) {
#pragma unroll
                            for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
                                for (int e = 0; e < 4; ++e) c[mt][e] += start[mt][e];
                        }
                        const float sa = scale_float(s_lo, i);
                        const float sb = scale_float(s_hi, i);
#pragma unroll
                        for (int mt = 0; mt < kMTiles; ++mt) {
                            acc[set][j][mt][0] = fmaf(sa, c[mt][0], acc[set][j][mt][0]);
                            acc[set][j][mt][2] = fmaf(sb, c[mt][2], acc[set][j][mt][2]);
                            if constexpr (!kSingleRow) {  // elements 1 and 3 hold the odd batch rows
                                acc[set][j][mt][1] = fmaf(sa, c[mt][1], acc[set][j][mt][1]);
                                acc[set][j][mt][3] = fmaf(sb, c[mt][3], acc[set][j][mt][3]);
                            }
                        }
                    }
                }
            }
        } else {
            // Word w of the lane's own chunk 4r + t, scaled in T.
            const int k0 = step * kStepCodes + (4 * r + t) * kChunkCodes;
            const int blk0 = k0 >> kBlockShift;
            Dequant<kBf16, kBits> dq[NSETS][kTiles][2][kBlocksPerChunk];
#pragma unroll
            for (int set = 0; set < NSETS; ++set)
#pragma unroll
                for (int j = 0; j < kTiles; ++j)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
#pragma unroll
                        for (int pb = 0; pb < kBlocksPerChunk; ++pb)
                            dq[set][j][h][pb].set(scale_pair<kBf16>(scale_at(f.s[set][j][h][r], pb)),
                                zero_point_at(f.z[set][j][h][r], blk0, pb));
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                const int pb = w / kWordsPerBlock;
#pragma unroll
                for (int set = 0; set < NSETS; ++set) {
#pragma unroll
                    for (int j = 0; j < kTiles; ++j) {
                        const int own = swizzled_position(lane >> 2, t);
                        const uint4 qa = ld_shared16(chunk_address(stage, slot_index(set, j, 0, r), own));
                        const uint4 qb = ld_shared16(chunk_address(stage, slot_index(set, j, 1, r), own));
                        u32 wa[kPairs], wb[kPairs];
                        dq[set][j][0][pb].word(word_of(qa, w), wa);
                        dq[set][j][1][pb].word(word_of(qb, w), wb);
#pragma unroll
                        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
                            for (int p = 0; p < kPairs / 2; ++p)
                                mma_16816<kBf16>(acc[set][j][mt], wa[2 * p], wb[2 * p], wa[2 * p + 1], wb[2 * p + 1],
                                    x[w][mt][2 * p], x[w][mt][2 * p + 1]);
                    }
                }
            }
        }
    }
}

// Cross-warp reduction of one column group. Accumulator element (j, mt, i)
// of lane (g, t) of a warp of part p is output column p kWarpCols + 16 j + g
// + 8 (i / 2), row 8 mt + 2 t + i % 2; `store` gets the column within the
// group, the row and the NSETS sums (in fixed order: cluster rank, then
// warp), times the row's inverse RMS when the prologue is on. With
// kClusterK > 1 the barrier spans the cluster, the sums read every CTA's
// partials and the CTAs share the outputs. The shared arrays alternate
// between groups so that one barrier a group suffices: a CTA writes a
// buffer again only after the next group's barrier, which every CTA reaches
// after its reads of this one.
constexpr int kVals = kTiles * kMTiles * 4;
template <int NSETS>
struct TcShared {
    uint4 stages[kWarps][kStages][stage_bytes<NSETS>() / 16];
    float partial[2][NSETS][kVals][kWarps][32];
    float squares[2][kRms ? kWarps : 1][kRms ? 8 * kMTiles : 1];
};

template <int NSETS, class Store>
__device__ __forceinline__ void tc_finish(
    TcShared<NSETS>& shared, const float (&acc)[NSETS][kTiles][kMTiles][4], const float (&ss)[kMTiles],
    int lane, int warp, int parity, int m, float epsilon, Store store)
{
    auto& partial = shared.partial;
    auto& squares = shared.squares;
    // The partial or square at `local` (this CTA's copy) of CTA `rank` of the cluster.
    auto of_rank = [](const float& local, int rank) {
        if constexpr (kClusterK == 1) {
            return local;
        } else {
            return cluster_load_f32(shared_address(&local), rank);
        }
    };

#pragma unroll
    for (int set = 0; set < NSETS; ++set)
#pragma unroll
        for (int j = 0; j < kTiles; ++j)
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    partial[parity][set][(j * kMTiles + mt) * 4 + i][warp][lane] = acc[set][j][mt][i];
    if constexpr (kRms) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
            float v = ss[mt];
            v += __shfl_xor_sync(0xffffffffu, v, 1);
            v += __shfl_xor_sync(0xffffffffu, v, 2);
            if ((lane & 3) == 0) {
                squares[parity][warp][8 * mt + (lane >> 2)] = v;
            }
        }
    }
    int first = (int)threadIdx.x;
    if constexpr (kClusterK > 1) {
        cluster_sync();
        first += cluster_rank() * kThreads;
    } else {
        __syncthreads();
    }

    for (int e = first; e < kColWarps * kVals * 32; e += kClusterK * kThreads) {
        const int part = kColWarps == 1 ? 0 : e / (kVals * 32);  // the column warps' share of the group
        const int v = kColWarps == 1 ? e >> 5 : (e >> 5) % kVals;
        const int l = e & 31;
        const int j = v / (kMTiles * 4);
        const int mt = (v / 4) % kMTiles;
        const int i = v & 3;
        const int col = part * kWarpCols + 16 * j + (l >> 2) + 8 * (i >> 1);
        const int row = 8 * mt + 2 * (l & 3) + (i & 1);
        if (row >= m) {
            continue;
        }
        float sums[NSETS];
#pragma unroll
        for (int set = 0; set < NSETS; ++set) {
            float s = 0.0f;
#pragma unroll
            for (int r = 0; r < kClusterK; ++r)
#pragma unroll
                for (int ww = 0; ww < kKWarps; ++ww) s += of_rank(partial[parity][set][v][ww * kColWarps + part][l], r);
            sums[set] = s;
        }
        if constexpr (kRms) {
            float sq = 0.0f;
#pragma unroll
            for (int r = 0; r < kClusterK; ++r)
#pragma unroll
                for (int ww = 0; ww < kKWarps; ++ww) sq += of_rank(squares[parity][ww * kColWarps][row], r);
            const float r = inv_rms(sq, epsilon);
#pragma unroll
            for (int set = 0; set < NSETS; ++set) sums[set] *= r;
        }
        store(col, row, sums);
    }
}

#if NBITS_PREFETCH_FIRST
// Asks L2 for the bytes in [p, p + bytes), trimmed to whole 16-byte units
// (cp.async.bulk.prefetch's granularity, and nothing outside the range). A
// hint: nothing is waited for or read back.
__device__ __forceinline__ void prefetch_l2(const void* p, int bytes)
{
    const unsigned long long begin = ((unsigned long long)p + 15u) & ~15ull;
    const unsigned long long end = ((unsigned long long)p + (unsigned long long)bytes) & ~15ull;
    if (begin < end) {
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" : : "l"(begin), "r"((u32)(end - begin)) : "memory");
    }
}

// What the warps of a column group read first: the k steps that fill every
// warp's ring (of every CTA of a cluster), at the start of each row. Only
// those: a whole group is up to half a MB on a long K, and a grid's worth of
// those would push out of L2 what the kernel before still streams.
constexpr int kPrefetchCodes =
    kStages * kSplitWarps * kStepCodes < kRowCodes ? kStages * kSplitWarps * kStepCodes : kRowCodes;
constexpr int kPrefetchBlocks = (kPrefetchCodes + kBlock - 1) / kBlock;

// The first kPrefetchCodes of rows [n0, n_end) of every set: weights, block
// scales and zero points, one row's piece a lane, one kind of piece a warp.
// The CTAs of a cluster take a share of the rows each.
template <int NSETS>
__device__ __forceinline__ void prefetch_rows_to_l2(const u8* const (&b)[NSETS], const void* const (&scales)[NSETS],
                                                    const u8* const (&zp)[NSETS], int n0, int n_end)
{
    int rows = n_end - n0;
    if constexpr (kClusterK > 1) {
        const int share = (rows + kClusterK - 1) / kClusterK;
        n0 += min(rows, share * (int)cluster_rank());
        rows = max(0, min(n_end - n0, share));
    }
    const int warp = (int)threadIdx.x >> 5;
    constexpr int kPieces = kHasZp ? 3 : 2;
#pragma unroll
    for (int set = 0; set < NSETS; ++set)
#pragma unroll
        for (int piece = 0; piece < kPieces; ++piece) {
            if (warp != (set * kPieces + piece) % kWarps) {
                continue;
            }
            for (int r = (int)threadIdx.x & 31; r < rows; r += 32) {
                const long long row = n0 + r;
                if (piece == 0) {
                    prefetch_l2(b[set] + row * kRowBytes, kPrefetchCodes * kBits / 8);
                } else if (piece == 1) {
                    prefetch_l2(static_cast<const scale_raw_t*>(scales[set]) + row * kKBlocks,
                                kPrefetchBlocks * (int)sizeof(scale_raw_t));
                } else {
                    prefetch_l2(zp[set] + row * kZpRowBytes, kBits == 4 ? (kPrefetchBlocks + 1) / 2 : kPrefetchBlocks);
                }
            }
        }
}
#endif

// The whole kernel body. Cluster c (CTA c when kClusterK is 1) takes column
// groups c, c + clusters, ... (kCtaCols columns each); warp w of CTA rank r
// takes the kWarpCols columns of part w % kColWarps and k steps
// r kKWarps + w / kColWarps, + kSplitWarps, ... of each group. The
// steps of all its groups form one sequence per warp, pipelined across group
// boundaries, so a CTA pays the DRAM latency once, not once a group.
// store(group, col, row, sums) writes one output.
template <int NSETS, class Store>
__device__ __forceinline__ void tc_run(
    const u8* const (&b)[NSETS], const void* const (&scales)[NSETS], const u8* const (&zp)[NSETS],
    const void* a, const void* gamma, int m, int n, float epsilon, Store store)
{
    const int lane = (int)threadIdx.x & 31;
    const int warp = (int)threadIdx.x >> 5;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int groups = (n + kCtaCols - 1) / kCtaCols;
    const int cluster = (int)blockIdx.x / kClusterK;
    const int clusters = (int)gridDim.x / kClusterK;
    const int my_groups = cluster < groups ? (groups - 1 - cluster) / clusters + 1 : 0;
    // Every warp walks the same number of items a group (a warp with fewer k
    // steps idles through the last), so that the group's cross-warp
    // reduction and its __syncthreads come at the same point of the unrolled
    // pipeline in every warp.
    const int steps = (kSteps + kSplitWarps - 1) / kSplitWarps;
    const int part = warp % kColWarps;
    int kwarp = warp / kColWarps;  // among the cluster's warps that split K
    if constexpr (kClusterK > 1) {
        kwarp += cluster_rank() * kKWarps;
    }

    // The layout the launch sizes dynamic shared memory by; a smaller
    // allocation is a launch error, not a silent overrun.
    extern __shared__ uint4 decode_shared_memory[];
    TcShared<NSETS>& shared = *reinterpret_cast<TcShared<NSETS>*>(decode_shared_memory);
    u32 dynamic_bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_bytes));
    if (dynamic_bytes < sizeof(TcShared<NSETS>)) {
        __trap();
    }

#if NBITS_PROGRAMMATIC
    // A programmatic dependent: the kernel before this one on the stream
    // may still run until griddepcontrol.wait, so nothing it writes is read
    // and nothing is written before. The kernel after this one may launch
    // its CTAs as soon as every CTA here has started: they take SMs as the
    // CTAs here finish, instead of after the last one and a launch gap.
    asm volatile("griddepcontrol.launch_dependents;" : : : "memory");
#if NBITS_PREFETCH_FIRST
    // Such a CTA starts while the kernel before it still runs (in its last,
    // partial round of CTAs, when DRAM has bandwidth to spare): L2 fetches
    // what its warps read first (kPrefetchCodes of each row of its first
    // column group, with their scales and zero points) meanwhile, instead of
    // every CTA paying DRAM's latency after the wait.
    // A prefetch hands nothing to the kernel, and L2 is where every SM's
    // writes meet, so it cannot show the kernel stale bytes.
    if (cluster < groups) {
        prefetch_rows_to_l2<NSETS>(b, scales, zp, cluster * kCtaCols, min(n, (cluster + 1) * kCtaCols));
    }
#endif
    asm volatile("griddepcontrol.wait;" : : : "memory");
#endif

    TcActs act;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
        const int row = 8 * mt + g;
        act.ok[mt] = row < m;
        act.row[mt] = static_cast<const u16*>(a) + (long long)(act.ok[mt] ? row : 0) * kK;
    }
    act.gamma = gamma;

    float acc[NSETS][kTiles][kMTiles][4];
    float ss[kMTiles];
    auto clear = [&]() {
#pragma unroll
        for (int set = 0; set < NSETS; ++set)
#pragma unroll
            for (int j = 0; j < kTiles; ++j)
#pragma unroll
                for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
                    for (int i = 0; i < 4; ++i) acc[set][j][mt][i] = 0.0f;
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) ss[mt] = 0.0f;
    };
    clear();
    int parity = 0;

    // The items of this warp in order: k steps kwarp, kwarp + kSplitWarps, ...
    // of groups cluster, + clusters, ... Loads and computes walk them with
    // their own cursors (loads run kStages - 1 items ahead).
    struct Cursor {
        int group, index;  // column group, and the item's index among the group's steps
    };
    Cursor next_load{cluster, 0};
    Cursor next_compute{cluster, 0};
    auto advance = [&](Cursor& c) {
        if (++c.index == steps) {
            c.index = 0;
            c.group += clusters;
        }
    };
    const u32 ring = shared_address(shared.stages[warp]);

    auto load = [&](TcFrag<NSETS>& f, int stage, int) {
        const int n0 = next_load.group * kCtaCols + part * kWarpCols;
        const int step = kwarp + next_load.index * kSplitWarps;
        advance(next_load);
        if (step >= kSteps) {
            return;
        }
        const long long row = n0 + g;
        Weights w[NSETS];
#pragma unroll
        for (int set = 0; set < NSETS; ++set) {
            w[set].b = b[set] + row * kRowBytes + t * 16;
            w[set].s = static_cast<const scale_raw_t*>(scales[set]) + row * kKBlocks;
            w[set].z = zp[set] + row * kZpRowBytes;
        }
        const u32 at = ring + (u32)(stage * stage_bytes<NSETS>());
        if constexpr (kStageActs) {
            // The step's activations of rows 0 .. m - 1, 8 codes a piece; zeros past K.
#pragma unroll
            for (int p = lane; p < kActRows * kActPiecesPerRow; p += 32) {
                const int r = p / kActPiecesPerRow;
                const int piece = p % kActPiecesPerRow;
                const int k = step * kStepCodes + 8 * piece;
                if (r < m) {
                    const bool present = k < kK;
                    cp_async16_l1(at + (u32)(weight_stage_bytes<NSETS>() + r * kActRowStride + 16 * piece),
                                  static_cast<const u16*>(a) + (long long)r * kK + (present ? k : 0),
                                  present ? 16 : 0);
                }
            }
        }
        const bool tail = kHasTail && step >= kFullSteps;
        if (n0 + kWarpCols <= n) {
            if (!tail) {
                tc_load<false, true>(f, at, w, b, 0u, g, t, step);
            } else {
                tc_load<true, true>(f, at, w, b, 0u, g, t, step);
            }
        } else {
            u32 rows_ok = 0u;
#pragma unroll
            for (int jj = 0; jj < kTiles; ++jj)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    if (n0 + 16 * jj + 8 * h + g < n) rows_ok |= 1u << (2 * jj + h);
            if (!tail) {
                tc_load<false, false>(f, at, w, b, rows_ok, g, t, step);
            } else {
                tc_load<true, false>(f, at, w, b, rows_ok, g, t, step);
            }
        }
    };
    ChunkActs early[kEarlyActs ? kChunks : 1];
    // prepare and compute each pick the full or the partial k step's template: a generic lambda that picked it
    // once for both is a host function to NVRTC (no execution space), which JIT mode rejects.
    auto prepare = [&](int) {
        if constexpr (kEarlyActs) {
            const int step = kwarp + next_compute.index * kSplitWarps;  // the step compute takes next
#pragma unroll
            for (int r = 0; r < kChunks; ++r) {
                if (step < kFullSteps) {
                    tc_acts<false>(early[r], 0u, ss, act, lane, step, r);
                } else if constexpr (kHasTail) {
                    if (step < kSteps) {
                        tc_acts<true>(early[r], 0u, ss, act, lane, step, r);
                    }
                }
            }
        }
    };
    auto compute = [&](const TcFrag<NSETS>& f, int stage, int) {
        const int group = next_compute.group;
        const int step = kwarp + next_compute.index * kSplitWarps;
        const bool last = next_compute.index == steps - 1;
        advance(next_compute);
        const u32 at = ring + (u32)(stage * stage_bytes<NSETS>());
        if (step < kFullSteps) {
            tc_compute<false>(f, at, early, acc, ss, act, lane, step);
        } else if constexpr (kHasTail) {
            if (step < kSteps) {
                tc_compute<true>(f, at, early, acc, ss, act, lane, step);
            }
        }
        if (last) {
            tc_finish<NSETS>(shared, acc, ss, lane, warp, parity, m, epsilon,
                [&](int col, int row, const float (&v)[NSETS]) { store(group, col, row, v); });
            parity ^= 1;
            clear();
        }
    };
    TcFrag<NSETS> frags[kStages];
    staged_steps(my_groups * steps, frags, load, prepare, compute);
    if constexpr (kClusterK > 1) {
        cluster_sync();  // no CTA leaves while the cluster reads its partials
    }
}

#endif  // tensor cores
}  // namespace nbits_decode

#if NBITS_ACT != 2

// Y = A' * dequant(B)^T (+ bias). Geometry in the file comment; rows of A
// past m are zeros, columns past n are neither read nor written.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_decode_matmul
extern "C" __global__ void __launch_bounds__(nbits_decode::kThreads, NBITS_MIN_BLOCKS) NBITS_DECODE_CLUSTER
nbits_decode_matmul(
    const act_t* __restrict__ a,               // align 16
    const unsigned char* __restrict__ b,       // align 16
    const scale_t* __restrict__ scales,        // align 8
    const unsigned char* __restrict__ zero_points,  // align 4
    const act_t* __restrict__ bias,            // align 2
    const gamma_t* __restrict__ gamma,         // align 16
    act_t* __restrict__ y,                     // align 2
    int m,
    int n,
    int bias_row_stride,
    float epsilon)
{
    using namespace nbits_decode;
    const u8* const bs[1] = {b};
    const void* const ss[1] = {scales};
    const u8* const zs[1] = {zero_points};
    const u16* bias_bits = reinterpret_cast<const u16*>(bias);
    u16* out = reinterpret_cast<u16*>(y);
    tc_run<1>(bs, ss, zs, a, gamma, m, n, epsilon, [&](int group, int col, int row, const float (&v)[1]) {
        const int c = group * kCtaCols + col;
        if (c < n) {
            out[(long long)row * n + c] =
                round_output<kBf16>(v[0], bias_bits, (long long)row * bias_row_stride + c);
        }
    });
}
#endif

// Y = silu(A' * W_gate^T) * (A' * W_up^T), both sets in one pass over A.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_decode_gate_up
extern "C" __global__ void __launch_bounds__(nbits_decode::kThreads, NBITS_MIN_BLOCKS) NBITS_DECODE_CLUSTER
nbits_decode_gate_up(
    const act_t* __restrict__ a,               // align 16
    const unsigned char* __restrict__ b_gate,  // align 16
    const scale_t* __restrict__ scales_gate,   // align 8
    const unsigned char* __restrict__ zp_gate, // align 4
    const unsigned char* __restrict__ b_up,    // align 16
    const scale_t* __restrict__ scales_up,     // align 8
    const unsigned char* __restrict__ zp_up,   // align 4
    const gamma_t* __restrict__ gamma,         // align 16
    act_t* __restrict__ y,                     // align 2
    int m,
    int n,
    float epsilon)
{
    using namespace nbits_decode;
    const u8* const bs[2] = {b_gate, b_up};
    const void* const ss[2] = {scales_gate, scales_up};
    const u8* const zs[2] = {zp_gate, zp_up};
    u16* out = reinterpret_cast<u16*>(y);
    tc_run<2>(bs, ss, zs, a, gamma, m, n, epsilon, [&](int group, int col, int row, const float (&v)[2]) {
        const int c = group * kCtaCols + col;
        if (c < n) {
            out[(long long)row * n + c] = float_to_bits<kBf16>(silu(v[0]) * v[1]);
        }
    });
}
#endif

#else  // NBITS_ACT == 2
// ============================================================ fp32, CUDA cores
namespace nbits_decode {

constexpr int kCols = NBITS_COLS_PER_WARP;
constexpr int kMaxM = NBITS_MAX_M;
constexpr int kCtaCols = kWarps * kCols;
constexpr int kStepCodes = 32 * kChunkCodes;  // one 16-byte chunk a lane
constexpr int kStepBytes = 512;
constexpr int kFullSteps = kK / kStepCodes;
constexpr bool kHasTail = kK % kStepCodes != 0;

template <int NSETS>
struct F32Frag {
    uint4 q[NSETS][kCols];
    scale_raw_t s[NSETS][kCols][kBlocksPerChunk];
    u32 z[NSETS][kCols][kHasZp ? kBlocksPerChunk : 1];
};

struct F32Acts {
    const float* row[kMaxM];
    bool ok[kMaxM];
    const float* gamma;
};

template <bool TAIL, int NSETS>
__device__ __forceinline__ void f32_load(F32Frag<NSETS>& f, const Weights (&w)[NSETS], u32 cols_ok, int lane, int step)
{
    const int k0 = step * kStepCodes + lane * kChunkCodes;
    const bool chunk_ok = !TAIL || k0 < kK;
    const int blk0 = k0 >> kBlockShift;
#pragma unroll
    for (int set = 0; set < NSETS; ++set) {
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
            const bool ok = chunk_ok && ((cols_ok >> c) & 1u);
            uint4 q = {0u, 0u, 0u, 0u};
            if (ok) {
                q = load_chunk<TAIL>(w[set].b + (long long)c * kRowBytes + step * kStepBytes, k0);
            }
            f.q[set][c] = q;
#pragma unroll
            for (int pb = 0; pb < kBlocksPerChunk; ++pb) {
                const int blk = blk0 + pb;
                const bool ok_b = ok && (kBlocksPerChunk == 1 || !TAIL || blk < kKBlocks);
                scale_raw_t s = 0;
                u32 z = 0u;
                if (ok_b) {
                    s = load_scale<false>(w[set].s + c * kKBlocks + blk);
                    if constexpr (kHasZp) {
                        z = ld_u8(w[set].z + c * kZpRowBytes + zero_point_byte(blk));
                    }
                }
                f.s[set][c][pb] = s;
                f.z[set][c][kHasZp ? pb : 0] = z;
            }
        }
    }
}

// A[row][k .. k + kWordCodes) as floats (zeros past K).
template <bool TAIL>
__device__ __forceinline__ void load_f32_word(const float* p, int k, float (&x)[kWordCodes])
{
    if (!TAIL || k + kWordCodes <= kK) {
#pragma unroll
        for (int h = 0; h < kWordCodes / 4; ++h) {
            u32 v[4];
            ld_words<16, kActAlign>(p + k + 4 * h, v);
#pragma unroll
            for (int i = 0; i < 4; ++i) x[4 * h + i] = __uint_as_float(v[i]);
        }
    } else {
#pragma unroll
        for (int i = 0; i < kWordCodes; ++i) x[i] = (k + i < kK) ? ld_f32(p + k + i) : 0.0f;
    }
}

template <bool TAIL, int NSETS>
__device__ __forceinline__ void f32_compute(
    const F32Frag<NSETS>& f, float (&acc)[NSETS][kCols][kMaxM], float (&ss)[kMaxM],
    const F32Acts& act, int lane, int step)
{
    const int k0 = step * kStepCodes + lane * kChunkCodes;
    const int blk0 = k0 >> kBlockShift;
    float part[NSETS][kCols][kMaxM];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        const int k = k0 + w * kWordCodes;
        const int pb = w / kWordsPerBlock;
        if (w % kWordsPerBlock == 0) {
#pragma unroll
            for (int set = 0; set < NSETS; ++set)
#pragma unroll
                for (int c = 0; c < kCols; ++c)
#pragma unroll
                    for (int mr = 0; mr < kMaxM; ++mr) part[set][c][mr] = 0.0f;
        }
        float d[NSETS][kCols][kWordCodes];
#pragma unroll
        for (int set = 0; set < NSETS; ++set)
#pragma unroll
            for (int c = 0; c < kCols; ++c) {
                const float zero = 8388608.0f + (float)zero_point_of(f.z[set][c][kHasZp ? pb : 0], blk0 + pb);
                dequant_word_f32(word_of(f.q[set][c], w), zero, d[set][c]);
            }
        float gm[kWordCodes];
        if constexpr (kRms) {
            load_f32_word<TAIL>(act.gamma, k, gm);
        }
#pragma unroll
        for (int mr = 0; mr < kMaxM; ++mr) {
            float x[kWordCodes];
#pragma unroll
            for (int i = 0; i < kWordCodes; ++i) x[i] = 0.0f;
            if (act.ok[mr]) {
                load_f32_word<TAIL>(act.row[mr], k, x);
            }
            if constexpr (kRms) {
#pragma unroll
                for (int i = 0; i < kWordCodes; ++i) {
                    ss[mr] = fmaf(x[i], x[i], ss[mr]);
                    x[i] *= gm[i];
                }
            }
#pragma unroll
            for (int set = 0; set < NSETS; ++set)
#pragma unroll
                for (int c = 0; c < kCols; ++c)
#pragma unroll
                    for (int i = 0; i < kWordCodes; ++i)
                        part[set][c][mr] = fmaf(d[set][c][i], x[i], part[set][c][mr]);
        }
        if (w % kWordsPerBlock == kWordsPerBlock - 1) {
#pragma unroll
            for (int set = 0; set < NSETS; ++set)
#pragma unroll
                for (int c = 0; c < kCols; ++c) {
                    const float s = f.s[set][c][pb];
#pragma unroll
                    for (int mr = 0; mr < kMaxM; ++mr)
                        acc[set][c][mr] = fmaf(s, part[set][c][mr], acc[set][c][mr]);
                }
        }
    }
}

template <int NSETS>
__device__ __forceinline__ void f32_accumulate(
    const Weights (&w)[NSETS], const F32Acts& act, u32 cols_ok, int lane,
    float (&acc)[NSETS][kCols][kMaxM], float (&ss)[kMaxM])
{
#pragma unroll
    for (int set = 0; set < NSETS; ++set)
#pragma unroll
        for (int c = 0; c < kCols; ++c)
#pragma unroll
            for (int mr = 0; mr < kMaxM; ++mr) acc[set][c][mr] = 0.0f;
#pragma unroll
    for (int mr = 0; mr < kMaxM; ++mr) ss[mr] = 0.0f;

    F32Frag<NSETS> f0, f1;
    pipelined_steps(0, 1, kFullSteps, f0, f1,
        [&](F32Frag<NSETS>& f, int step) { f32_load<false>(f, w, cols_ok, lane, step); },
        [&](const F32Frag<NSETS>& f, int step) { f32_compute<false>(f, acc, ss, act, lane, step); });
    if constexpr (kHasTail) {
        f32_load<true>(f0, w, cols_ok, lane, kFullSteps);
        f32_compute<true>(f0, acc, ss, act, lane, kFullSteps);
    }
}

struct F32Lane {
    int lane, col0;
    u32 cols_ok;
};

__device__ __forceinline__ F32Lane f32_lane(int n)
{
    F32Lane l;
    l.lane = (int)threadIdx.x & 31;
    l.col0 = (int)blockIdx.x * kCtaCols + ((int)threadIdx.x >> 5) * kCols;
    l.cols_ok = 0u;
#pragma unroll
    for (int c = 0; c < kCols; ++c)
        if (l.col0 + c < n) l.cols_ok |= 1u << c;
    return l;
}

__device__ __forceinline__ Weights f32_weights(const F32Lane& l, const u8* b, const void* scales, const u8* zp)
{
    Weights w;
    w.b = b + (long long)l.col0 * kRowBytes + l.lane * 16;
    w.s = static_cast<const scale_raw_t*>(scales) + (long long)l.col0 * kKBlocks;
    w.z = zp + (long long)l.col0 * kZpRowBytes;
    return w;
}

__device__ __forceinline__ F32Acts f32_acts(const void* a, const void* gamma, int m)
{
    F32Acts act;
#pragma unroll
    for (int mr = 0; mr < kMaxM; ++mr) {
        act.ok[mr] = mr < m;
        act.row[mr] = static_cast<const float*>(a) + (long long)(act.ok[mr] ? mr : 0) * kK;
    }
    act.gamma = static_cast<const float*>(gamma);
    return act;
}

// Warp sums of every (set, column, row); `store` gets the column offset, the
// row and the NSETS sums (times the row's inverse RMS) in lane 0.
template <int NSETS, class Store>
__device__ __forceinline__ void f32_finish(
    float (&acc)[NSETS][kCols][kMaxM], float (&ss)[kMaxM], int lane, int m, float epsilon, Store store)
{
#pragma unroll
    for (int mr = 0; mr < kMaxM; ++mr) {
        float r = 1.0f;
        if constexpr (kRms) {
            r = inv_rms(warp_sum(ss[mr]), epsilon);
        }
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
            float v[NSETS];
#pragma unroll
            for (int set = 0; set < NSETS; ++set) v[set] = warp_sum(acc[set][c][mr]) * r;
            if (lane == 0 && mr < m) {
                store(c, mr, v);
            }
        }
    }
}

}  // namespace nbits_decode

#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_decode_matmul
extern "C" __global__ void __launch_bounds__(nbits_decode::kThreads, NBITS_MIN_BLOCKS) nbits_decode_matmul(
    const act_t* __restrict__ a,               // align 16
    const unsigned char* __restrict__ b,       // align 16
    const scale_t* __restrict__ scales,        // align 4
    const unsigned char* __restrict__ zero_points,  // align 1
    const act_t* __restrict__ bias,            // align 4
    const gamma_t* __restrict__ gamma,         // align 16
    act_t* __restrict__ y,                     // align 4
    int m,
    int n,
    int bias_row_stride,
    float epsilon)
{
    using namespace nbits_decode;
    const F32Lane l = f32_lane(n);
    const Weights w[1] = {f32_weights(l, b, scales, zero_points)};
    const F32Acts act = f32_acts(a, gamma, m);
    float acc[1][kCols][kMaxM];
    float ss[kMaxM];
    f32_accumulate<1>(w, act, l.cols_ok, l.lane, acc, ss);
    const int col0 = l.col0;
    f32_finish<1>(acc, ss, l.lane, m, epsilon, [&](int c, int row, const float (&v)[1]) {
        const int col = col0 + c;
        if (col < n) {
            y[(long long)row * n + col] = round_output_f32(v[0], bias, (long long)row * bias_row_stride + col);
        }
    });
}
#endif

#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_decode_gate_up
extern "C" __global__ void __launch_bounds__(nbits_decode::kThreads, NBITS_MIN_BLOCKS) nbits_decode_gate_up(
    const act_t* __restrict__ a,               // align 16
    const unsigned char* __restrict__ b_gate,  // align 16
    const scale_t* __restrict__ scales_gate,   // align 4
    const unsigned char* __restrict__ zp_gate, // align 1
    const unsigned char* __restrict__ b_up,    // align 16
    const scale_t* __restrict__ scales_up,     // align 4
    const unsigned char* __restrict__ zp_up,   // align 1
    const gamma_t* __restrict__ gamma,         // align 16
    act_t* __restrict__ y,                     // align 4
    int m,
    int n,
    float epsilon)
{
    using namespace nbits_decode;
    const F32Lane l = f32_lane(n);
    const Weights w[2] = {f32_weights(l, b_gate, scales_gate, zp_gate), f32_weights(l, b_up, scales_up, zp_up)};
    const F32Acts act = f32_acts(a, gamma, m);
    float acc[2][kCols][kMaxM];
    float ss[kMaxM];
    f32_accumulate<2>(w, act, l.cols_ok, l.lane, acc, ss);
    const int col0 = l.col0;
    f32_finish<2>(acc, ss, l.lane, m, epsilon, [&](int c, int row, const float (&v)[2]) {
        const int col = col0 + c;
        if (col < n) {
            y[(long long)row * n + col] = silu(v[0]) * v[1];
        }
    });
}
#endif

#endif  // NBITS_ACT
