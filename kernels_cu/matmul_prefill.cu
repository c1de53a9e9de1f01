// Prefill (M > 16) MatMulNBits on tensor cores, reading ONNX Runtime's weight
// layout unchanged: Y[M, N] = A[M, K] . dequant(B)^T (+ bias).
//
//   B      uint8 [N, k_blocks, blob], blob = BLOCK_SIZE * BITS / 8; int4: byte j
//          of a block holds k = 2j (low nibble) and 2j + 1 (high nibble)
//   scales [N, k_blocks] of act_t or fp32
//   zp     uint8, int4: [N, ceil(k_blocks / 2)], block b in nibble b & 1 of
//          byte b / 2; int8: [N, k_blocks]. Absent: 8 (int4) or 128 (int8)
//
// Entries (each behind NBITS_ALL_ENTRIES || NBITS_ENTRY_<name>):
//   nbits_prefill_gemm     fused dequantising mma.sync GEMM (+ bias)
//   nbits_prefill_gate_up  the same with the gate and up weight sets of one
//                          paired node in one CTA: y = silu(gate) * up
//   nbits_prefill_gemm_tma, nbits_prefill_gate_up_tma  the two with NBITS_TMA,
//                          taking the tensor maps of A and the weights
//   nbits_prefill_gemm_stream_k, nbits_prefill_gate_up_stream_k  the two
//                          *_tma entries over a stream-K grid (NBITS_STREAM_K),
//                          taking a scratch of partial tiles and their flags
//   nbits_zero_words       zeroes the stream-K flags before each run
//   nbits_dequantize       W[n_count, K] of act_t for columns n_begin.., for
//                          the dequantise + cuBLASLt route of large M
//   nbits_rmsnorm_rows     A'[r, k] = A[r, k] * inv_std[r] * gamma[k]
//
// Fused GEMM scheme. The weights are the mma A operand (16 output columns x 16
// k, row-major: ORT's K-contiguous columns), the activations the B operand
// (8 tokens x 16 k), fp32 accumulators hold C[column][token]. A dot product
// does not depend on the order of k, so both operands use one permutation of
// k within each 8-k unit group that lets every thread read its weight bytes
// contiguously: in a warp's k range, thread t (lane & 3) owns the 8-k units
// t * UNITS + j (j < UNITS). In the mma step 2j + h of those units, its slot
// pair {2t, 2t+1} is k pair 2h of its unit j and slot pair {2t+8, 2t+9} is k
// pair 2h + 1. The B operand takes the same pairs straight from the
// activation row (one 16-byte load per unit), the A operand dequantises the
// matching bytes of the weight row (one int4 byte = one k pair).
//
// Dequantisation in registers, exact to one rounding: a code c is placed in
// the mantissa of the magic number MAGIC = 1024 (fp16) or 128 (bf16) with
// prmt + lop3 (int4) or prmt (int8), MAGIC + c - (MAGIC + zp) is exact, and
// the product with the scale is the only rounding (the scale is first rounded
// to act_t when it is fp32). bf16 int8 codes need 8 mantissa bits and go
// through fp32 instead. nbits_dequantize uses the same helpers, so both
// routes see the same weights.
//
// Compile-time macros (defaults in brackets):
//   NBITS_ACT_BF16   [0]   activations, output, bias: 0 fp16, 1 bf16
//   NBITS_SCALE_F32  [0]   scales: 0 act_t, 1 fp32
//   NBITS_GAMMA_F32  [0]   RMS-norm gamma: 0 act_t, 1 fp32
//   NBITS_BITS       [4]   4 or 8
//   NBITS_BLOCK_SIZE [32]  power of two >= 16
//   NBITS_K          [4096]
//   NBITS_HAS_ZP     [0]   zero_points read (1) or the symmetric default (0)
//   NBITS_BIAS_MODE  [0]   0 none, 1 plain y = T(acc + bias),
//                          2 folded y = T(T(acc) + bias)
//   NBITS_TILE_N     [128] weight rows per CTA (paired: gate + up rows, so
//                          TILE_N / 2 output columns)
//   NBITS_TILE_M     [64]  tokens per CTA
//   NBITS_TILE_K     [64]  k per pipeline stage (64, 128 or 256)
//   NBITS_WARPS_N    [4]   warps across the CTA's weight rows
//   NBITS_WARPS_M    [2]   warps across its tokens
//   NBITS_WARPS_K    [1]   warps splitting each stage's k (summed at the end)
//   NBITS_STAGES     [4]   cp.async pipeline depth
//   NBITS_GROUP_N    [8]   CTA raster: groups of GROUP_N column tiles, tokens
//                          fastest inside a group, so a wave shares weights
//   NBITS_MIN_CTAS   [1]   __launch_bounds__ minimum CTAs per SM (register cap)
//   NBITS_FIRST_COLUMN_TILE [0] the column tile of grid x 0: a launch over
//                          the column tiles from it on (the plan splits the
//                          K of a grid's last, partial wave of tiles in a
//                          second launch)
//   NBITS_WGMMA      [0]   1: sm_90a warpgroup MMA (wgmma.mma_async) main loop;
//                          needs TILE_N 128 or 256 (64 weight rows a
//                          warpgroup), WARPS_N = TILE_N / 16, TILE_K 64,
//                          WARPS_M 1, WARPS_K 1, TILE_M 64, 128 or 256, and
//                          compute_90a
//   NBITS_SPLIT_K    [1]   CTAs sharing one output tile (1..8, compute_90+):
//                          a thread block cluster of SPLIT_K CTAs along z,
//                          CTA z taking k tiles [z T, z T + T) with T =
//                          ceil(k tiles / SPLIT_K); each stages its fp32
//                          partial tile and the epilogue sums the cluster's
//                          partials in z order through distributed shared
//                          memory, every CTA storing its share of the tile
//   NBITS_PRODUCER_WARPS [0] wgmma only (1, 2 or 4): warps after the computing
//                          warpgroups that only issue the k tiles' copies and
//                          hand the stages over through mbarriers (a full and
//                          an empty one a stage, after the stages in SMEM)
//   NBITS_TMA        [0]   1 (entries *_tma, wgmma, with 0, 1 or 4 producer
//                          warps): the weights and activations of a k tile
//                          come by the tensor memory accelerator
//                          (cp.async.bulk.tensor, one instruction each,
//                          issued by the first producer, or without
//                          producers by thread 0) from the tensor maps the
//                          entries take, completing the stage's full
//                          mbarrier; the scales and zero points by cp.async
//                          (the producers', arriving on that barrier too,
//                          or every thread's, waited for as without TMA)
//   NBITS_STREAM_K   [0]   1 (entries *_stream_k, NBITS_TMA with 4 producer
//                          warps, no split-K): the grid's CTAs share the
//                          output tiles' k tiles evenly (see stream_k_gemm)
//                          instead of taking one tile each
//   NBITS_PROGRAMMATIC [0] 1 (GEMM entries, compute_90+): launched as a
//                          programmatic dependent of the kernel before it;
//                          each CTA waits for that kernel (griddepcontrol)
//                          before it touches global memory
//   NBITS_NORM_THREADS [256], NBITS_DEQ_THREADS [256], NBITS_DEQ_UNITS [4]
// Constraints (static_assert): TILE_N / WARPS_N % 16 == 0, TILE_M / WARPS_M
// % 8 == 0, UNITS = TILE_K / WARPS_K / 32 in {1, 2, 4}, 8 * UNITS <=
// BLOCK_SIZE, TILE_N % 32 == 0 (paired: % 64 == 0).
//
// Launch geometry (THREADS = 32 * (WARPS_N * WARPS_M * WARPS_K + PRODUCER_WARPS)):
//   nbits_prefill_gemm     grid (ceil(N / TILE_N), ceil(M / TILE_M), SPLIT_K),
//                          block THREADS, dynamic smem SMEM (below)
//   nbits_prefill_gate_up  grid (ceil(N / (TILE_N / 2)), ceil(M / TILE_M),
//                          SPLIT_K), block THREADS, dynamic smem SMEM
//   (*_tma alike; grid x less FIRST_COLUMN_TILE, or fewer column tiles)
//   *_stream_k             grid G <= the units (output tiles x k tiles;
//                          the plan: one CTA a slot), block THREADS, SMEM;
//                          partials G * 32 * WARPS_N * TILE_M / 2 floats, flags G
//                          words zeroed before the launch
//   nbits_zero_words       any grid, block any
//   nbits_dequantize       grid ceil(n_count * ceil(K / 8) / (DEQ_THREADS *
//                          DEQ_UNITS)), block DEQ_THREADS, no dynamic smem
//   nbits_rmsnorm_rows     grid rows, block NORM_THREADS, no dynamic smem
// SMEM = max(STAGES * STAGE, WARPS_K * TILE_M * (TILE_N + 4) * 4)
//        + (PRODUCER_WARPS or TMA ? 16 * STAGES : 0) (+ 1024 with wgmma, to align), with
//   STAGE = round_up_16(TILE_N * TILE_K * BITS / 8 + TILE_M * TILE_K * 2
//                       + TILE_N * 4 * (SW + (HAS_ZP ? ZW : 0)))
//   SPT = TILE_K >= BLOCK_SIZE ? TILE_K / BLOCK_SIZE : 1 (blocks per stage)
//   ES = sizeof(scale); SW = ((ES >= 4 ? 0 : 4 - ES) + SPT * ES - 1) / 4 + 1
//   ZB = BITS == 4 ? (SPT == 1 ? 1 : SPT / 2 + 1) : SPT; ZW = (ZB + 2) / 4 + 1
// The compiled module also exports it as the int nbits_prefill_smem_bytes.
// Above 48 KiB the host must raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
//
// Tile presets that measured fastest on an H200 (TILE_N, TILE_M, TILE_K,
// WARPS_N, WARPS_M, WARPS_K, STAGES, MIN_CTAS); above M = 128 the
// dequantise + cuBLASLt route is faster than every preset:
//   M <= 16         64,  16, 256, 4, 1, 2, 4, 1
//   16 < M <= 32    64,  32, 256, 4, 1, 2, 4, 1
//   32 < M <= 64   128,  64, 128, 4, 1, 2, 4, 1  (K < 4096: 64, 32, 128, 4, 1, 1, 4, 1)
//   64 < M <= 128  128, 128,  64, 4, 2, 1, 4, 2

#include "nbits/half.cuh"
#include "nbits/reduce.cuh"
#include "nbits/stream_k.cuh"

#ifndef NBITS_ACT_BF16
#define NBITS_ACT_BF16 0
#endif
#ifndef NBITS_SCALE_F32
#define NBITS_SCALE_F32 0
#endif
#ifndef NBITS_GAMMA_F32
#define NBITS_GAMMA_F32 0
#endif
#ifndef NBITS_BITS
#define NBITS_BITS 4
#endif
#ifndef NBITS_BLOCK_SIZE
#define NBITS_BLOCK_SIZE 32
#endif
#ifndef NBITS_K
#define NBITS_K 4096
#endif
#ifndef NBITS_HAS_ZP
#define NBITS_HAS_ZP 0
#endif
#ifndef NBITS_BIAS_MODE
#define NBITS_BIAS_MODE 0
#endif
#ifndef NBITS_TILE_N
#define NBITS_TILE_N 128
#endif
#ifndef NBITS_TILE_M
#define NBITS_TILE_M 64
#endif
#ifndef NBITS_TILE_K
#define NBITS_TILE_K 64
#endif
#ifndef NBITS_WARPS_N
#define NBITS_WARPS_N 4
#endif
#ifndef NBITS_WARPS_M
#define NBITS_WARPS_M 2
#endif
#ifndef NBITS_WARPS_K
#define NBITS_WARPS_K 1
#endif
#ifndef NBITS_STAGES
#define NBITS_STAGES 4
#endif
#ifndef NBITS_GROUP_N
#define NBITS_GROUP_N 8
#endif
#ifndef NBITS_MIN_CTAS
#define NBITS_MIN_CTAS 1
#endif
#ifndef NBITS_FIRST_COLUMN_TILE
#define NBITS_FIRST_COLUMN_TILE 0
#endif
#ifndef NBITS_WGMMA
#define NBITS_WGMMA 0
#endif
#ifndef NBITS_SPLIT_K
#define NBITS_SPLIT_K 1
#endif
#ifndef NBITS_PRODUCER_WARPS
#define NBITS_PRODUCER_WARPS 0
#endif
#ifndef NBITS_TMA
#define NBITS_TMA 0
#endif
#ifndef NBITS_STREAM_K
#define NBITS_STREAM_K 0
#endif
#ifndef NBITS_STREAM_K_ROUNDS  // 1 (with NBITS_STREAM_K): whole rounds of tiles after the shared ones (stream_k_gemm)
#define NBITS_STREAM_K_ROUNDS 0
#endif
#ifndef NBITS_PROGRAMMATIC
#define NBITS_PROGRAMMATIC 0
#endif
#if NBITS_PROGRAMMATIC && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "NBITS_PROGRAMMATIC needs griddepcontrol (compute capability 9.0 and newer)"
#endif
#ifndef NBITS_NORM_THREADS
#define NBITS_NORM_THREADS 256
#endif
#ifndef NBITS_DEQ_THREADS
#define NBITS_DEQ_THREADS 256
#endif
#ifndef NBITS_DEQ_UNITS
#define NBITS_DEQ_UNITS 4
#endif

namespace nbits_prefill {

typedef unsigned char u8;
typedef unsigned int u32;

#if NBITS_ACT_BF16
typedef __nv_bfloat16 act_t;
#else
typedef __half act_t;
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

// [[maybe_unused]]: a single-entry compile leaves some of these unreferenced.
[[maybe_unused]] constexpr bool kBf16 = NBITS_ACT_BF16 != 0;
[[maybe_unused]] constexpr int kBits = NBITS_BITS;
[[maybe_unused]] constexpr int kBlockSize = NBITS_BLOCK_SIZE;
[[maybe_unused]] constexpr int kK = NBITS_K;
[[maybe_unused]] constexpr bool kHasZp = NBITS_HAS_ZP != 0;
[[maybe_unused]] constexpr int kBiasMode = NBITS_BIAS_MODE;
[[maybe_unused]] constexpr int kKBlocks = (kK + kBlockSize - 1) / kBlockSize;
[[maybe_unused]] constexpr int kBlob = kBlockSize * kBits / 8;
[[maybe_unused]] constexpr int kRowBytes = kKBlocks * kBlob;  // one column of B
[[maybe_unused]] constexpr int kZpRowBytes = kBits == 4 ? (kKBlocks + 1) / 2 : kKBlocks;
[[maybe_unused]] constexpr int kDefaultZp = kBits == 4 ? 8 : 128;
[[maybe_unused]] constexpr int kScaleBytes = (int)sizeof(scale_t);

static_assert(kBits == 4 || kBits == 8, "NBITS_BITS is 4 or 8");
static_assert(kBlockSize >= 16 && (kBlockSize & (kBlockSize - 1)) == 0,
    "NBITS_BLOCK_SIZE is a power of two >= 16");

// ------------------------------------------------------------------ scalars

__device__ __forceinline__ float to_float(const __half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(const __nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(const float v) { return v; }

__device__ __forceinline__ act_t to_act(const float v)
{
#if NBITS_ACT_BF16
    return __float2bfloat16_rn(v);
#else
    return __float2half_rn(v);
#endif
}

__device__ __forceinline__ unsigned short act_bits(const act_t v)
{
    return *reinterpret_cast<const unsigned short*>(&v);
}

// The scale as act_t bits in both halves of a packed pair.
__device__ __forceinline__ u32 scale_pair(const scale_t s)
{
#if NBITS_SCALE_F32
    const u32 bits = act_bits(to_act(s));
#else
    const u32 bits = act_bits(s);
#endif
    return bits | (bits << 16);
}

// Packed act_t pair arithmetic, two elements per 32-bit register (low half =
// lower k). fma with 1 or -0 gives an exactly rounded add or multiply and
// exists for bf16 from sm_80 on.
__device__ __forceinline__ u32 pair_fma(const u32 a, const u32 b, const u32 c)
{
    u32 d;
#if NBITS_ACT_BF16
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
#else
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
#endif
    return d;
}

[[maybe_unused]] constexpr u32 kPairOne = kBf16 ? 0x3F803F80u : 0x3C003C00u;
[[maybe_unused]] constexpr u32 kPairNegZero = 0x80008000u;
// fp16 int4 takes a pair's high nibble in place (1024 + 16 code), so the
// exact step to the code multiplies that half by 1/16: (1, 1/16); bf16 (7
// mantissa bits) shifts the nibble down first: (1, 1).
[[maybe_unused]] constexpr bool kInt4InPlace = kBits == 4 && !kBf16;
[[maybe_unused]] constexpr u32 kPairInt4Step = kInt4InPlace ? 0x2C003C00u : kPairOne;

// The step to the exact codes (kPairInt4Step) as a value the compiler keeps
// in a register: a plain constant it re-materialises before every fma, one
// more instruction a pair. `positive` is a kernel argument known to be > 0,
// so the result is the constant.
__device__ __forceinline__ u32 held_step(const int positive)
{
    return kPairInt4Step | ((u32)positive >> 31);
}

// ------------------------------------------------------------ dequantising

// Per (column, block) constants of the dequantisation: `bias` is the packed
// -(MAGIC + zp) (fp16 int4: -(64 + zp) in the high half, for the nibble left
// in place; bf16 int8: the fp32 bits of -(2^23 + zp)), `scale` the packed
// scale pair.
struct DequantConst {
    u32 bias;
    u32 scale;
};

__device__ __forceinline__ DequantConst make_dequant_const(const scale_t s, const int zp)
{
    DequantConst c;
    c.scale = scale_pair(s);
    if (kBf16 && kBits == 8) {
        c.bias = __float_as_uint(-(8388608.0f + (float)zp));
    } else {
        // -(MAGIC + zp) in each half: the sign bit over MAGIC's exponent, zp in the mantissa, whose low byte
        // (nibble for fp16 int4's high half, -(64 + zp) counting sixteenths) MAGIC leaves zero, so one multiply-add
        // places zp in both halves without a carry.
        constexpr u32 kNegMagic = kBf16 ? 0xC300C300u : (kInt4InPlace ? 0xD400E400u : 0xE400E400u);
        constexpr u32 kZpPlaces = kInt4InPlace ? 0x00100001u : 0x00010001u;
        c.bias = kNegMagic + (u32)zp * kZpPlaces;
    }
    return c;
}

// (a & kMask) | c in one LOP3: written as an AND and an OR of two
// immediates, the compiler emits two instructions.
template <u32 kMask>
__device__ __forceinline__ u32 mask_or(const u32 a, const u32 c)
{
    u32 d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "n"(kMask), "r"(c));
    return d;
}

// The two codes of int4 byte `b` (k 2b in its low nibble, k 2b + 1 in its
// high one) of the unit's 4 bytes `w` in the mantissas of a magic pair:
// fp16 (1024 + low, 1024 + 16 high), from byte b copied to both halves;
// bf16 (128 + low, 128 + high), byte b of `w_shr4` = w >> 4 giving the high
// nibble. pair_fma(., kPairInt4Step, bias) then makes them exact codes.
__device__ __forceinline__ u32 int4_magic_pair(const u32 w, const u32 w_shr4, const int b)
{
    constexpr u32 kMagic = kBf16 ? 0x43004300u : 0x64006400u;
    if (kInt4InPlace) {
        return mask_or<0x00F0000Fu>(__byte_perm(w, 0u, (u32)(b | (b << 8))), kMagic);
    }
    return mask_or<0x000F000Fu>(__byte_perm(w, w_shr4, (u32)(b | ((b + 4) << 8))), kMagic);
}

// The dequantised act_t pair of k pair `p` of a unit; int8: `w0`, `w1` are
// the unit's 8 bytes. `step` is kPairInt4Step, or held_step() in a loop.
template <int p>
__device__ __forceinline__ u32 dequant_pair(const u32 w0, const u32 w1, const DequantConst c, const u32 step)
{
    if (kBits == 4) {
        const u32 v = int4_magic_pair(w0, w1, p);
        return pair_fma(pair_fma(v, step, c.bias), c.scale, kPairNegZero);
    } else {
        const u32 w = p < 2 ? w0 : w1;
        constexpr int b = 2 * (p & 1);
        if (kBf16) {
            const float lo = __uint_as_float(__byte_perm(w, 0x4B000000u, b | 0x7440)) + __uint_as_float(c.bias);
            const float hi = __uint_as_float(__byte_perm(w, 0x4B000000u, (b + 1) | 0x7440)) + __uint_as_float(c.bias);
            u32 d;
            asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
            return pair_fma(d, c.scale, kPairNegZero);
        } else {
            const u32 v = __byte_perm(w, 0x64646464u, b | 0x4040 | ((b + 1) << 8));
            return pair_fma(pair_fma(v, step, c.bias), c.scale, kPairNegZero);
        }
    }
}

// Unit j of a thread's weight words: int4 one word, int8 two.
template <int kWords>
struct UnitWords {
    u32 w[kWords];
};

// ------------------------------------------------------------------ PTX

__device__ __forceinline__ u32 smem_addr(const void* p)
{
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// Asynchronous global -> shared copy of `bytes` (4, 8 or 16) to the shared
// address `dst`; only the first `src_bytes` are read, the rest is zero-filled
// (0 reads nothing).
template <int bytes>
__device__ __forceinline__ void cp_async(const u32 dst, const void* src, const int src_bytes)
{
    if (bytes == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
            :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n"
            :: "r"(dst), "l"(src), "n"(bytes), "r"(src_bytes) : "memory");
    }
}

__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int pending>
__device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" :: "n"(pending) : "memory");
}

// mbarriers (shared addresses) of the warp-specialised pipeline.
__device__ __forceinline__ void mbarrier_init(const u32 bar, const u32 count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}

// One arrival, releasing this thread's earlier shared-memory writes.
__device__ __forceinline__ void mbarrier_arrive(const u32 bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}

// Waits until the barrier's phase of parity `parity` has completed. The
// suspend-time hint (ns) lets try_wait suspend the warp for up to that long;
// on the H200 it measured as fast as the loop without it and waits in
// NANOSLEEP.SYNCS for about as many rounds (see the README's instruction diet).
__device__ __forceinline__ void mbarrier_wait(const u32 bar, const u32 parity)
{
    u32 done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done) : "r"(bar), "r"(parity), "n"(10000000) : "memory");
    } while (done == 0u);
}

// A CUtensorMap as the driver encodes it (cuTensorMapEncodeTiled): 128
// opaque bytes, passed by value as a __grid_constant__ kernel parameter.
struct __align__(64) TmaMap {
    unsigned long long bits[16];
};

// Expects `bytes` more of the tensor memory accelerator's copies on the
// barrier's current phase, with this thread's arrival.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(const u32 bar, const u32 bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(bytes) : "memory");
}

// One arrival on the barrier once every cp.async this thread issued before
// has landed (counted in the barrier's expected arrivals: .noinc).
__device__ __forceinline__ void cp_async_mbarrier_arrive(const u32 bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" :: "r"(bar) : "memory");
}

// The box of `map` at element coordinates (x, y) into shared memory at
// `dst`, completing its bytes on the mbarrier `bar`; out-of-range elements
// are zeros.
__device__ __forceinline__ void tma_load_2d(const u32 dst, const TmaMap* map, const int x, const int y, const u32 bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n"
        :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(bar) : "memory");
}

// Makes this thread's mbarrier.init visible to the tensor memory
// accelerator's completions (the async proxy) before the CTA barrier after it.
__device__ __forceinline__ void fence_mbarrier_init()
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void prefetch_tma_map(const TmaMap* map)
{
    asm volatile("prefetch.tensormap [%0];\n" :: "l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}

// c += a . b, m16n8k16, fp32 accumulators.
__device__ __forceinline__ void mma_16816(float (&c)[4], const u32 (&a)[4], const u32 b0, const u32 b1)
{
#if NBITS_ACT_BF16
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
#else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
#endif
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ------------------------------------------------------------ fused GEMM

[[maybe_unused]] constexpr int kTileN = NBITS_TILE_N;
[[maybe_unused]] constexpr int kTileM = NBITS_TILE_M;
[[maybe_unused]] constexpr int kTileK = NBITS_TILE_K;
[[maybe_unused]] constexpr int kWarpsN = NBITS_WARPS_N;
[[maybe_unused]] constexpr int kWarpsM = NBITS_WARPS_M;
[[maybe_unused]] constexpr int kWarpsK = NBITS_WARPS_K;
[[maybe_unused]] constexpr int kStages = NBITS_STAGES;
[[maybe_unused]] constexpr int kThreads = 32 * kWarpsN * kWarpsM * kWarpsK;
[[maybe_unused]] constexpr int kWarpN = kTileN / kWarpsN;  // weight rows per warp
[[maybe_unused]] constexpr int kWarpM = kTileM / kWarpsM;  // tokens per warp
[[maybe_unused]] constexpr int kWarpK = kTileK / kWarpsK;  // k per warp and stage
[[maybe_unused]] constexpr int kUnits = kWarpK / 32;       // 8-k units per thread and stage
[[maybe_unused]] constexpr int kFragsN = kWarpN / 16;
[[maybe_unused]] constexpr int kFragsM = kWarpM / 8;
[[maybe_unused]] constexpr int kTilesK = (kK + kTileK - 1) / kTileK;
[[maybe_unused]] constexpr int kChunks = kTileK / 8;                   // 16-byte chunks per token row
[[maybe_unused]] constexpr int kWRowBytes = kTileK * kBits / 8;        // per weight row and stage
[[maybe_unused]] constexpr int kWCopy = kRowBytes % 16 == 0 ? 16 : 8;  // B rows 16-byte aligned?
[[maybe_unused]] constexpr int kUnitWords = kBits / 4;                 // 32-bit words per 8-k unit
[[maybe_unused]] constexpr int kThreadWords = kUnits * kUnitWords;     // per weight row and stage
[[maybe_unused]] constexpr bool kActAsync = kK % 8 == 0;               // 16-byte activation chunks
[[maybe_unused]] constexpr int kSpt = kTileK >= kBlockSize ? kTileK / kBlockSize : 1;
// The 4-byte words of a weight row's scales (zero points) a stage holds: those
// covering the tile's `bytes` bytes, which start on a multiple of `unit`
// bytes past the row's start, from their first byte's word. Where a row
// starts on a word and `bytes` is a divisor or a multiple of 4 (ONNX
// Runtime's usual shapes), a tile's bytes start on a multiple of their own
// count and straddle no more words than they fill; else up to 4 - unit bytes
// before them share their first word.
__host__ __device__ constexpr int meta_words(const int row_bytes, const int bytes, const int unit)
{
    if (row_bytes % 4 == 0 && (bytes % 4 == 0 || 4 % bytes == 0)) {
        return (bytes + 3) / 4;
    }
    return ((unit >= 4 ? 0 : 4 - unit) + bytes - 1) / 4 + 1;
}
[[maybe_unused]] constexpr int kScaleWords = meta_words(kKBlocks * kScaleBytes, kSpt * kScaleBytes, kScaleBytes);
// int4: a tile of kSpt >= 2 blocks starts on an even block, a whole byte.
[[maybe_unused]] constexpr int kZpTileBytes = kBits == 4 ? (kSpt == 1 ? 1 : kSpt / 2) : kSpt;
[[maybe_unused]] constexpr int kZpWords = kHasZp ? meta_words(kZpRowBytes, kZpTileBytes, 1) : 0;
[[maybe_unused]] constexpr int kWBytes = kTileN * kWRowBytes;
[[maybe_unused]] constexpr int kABytes = kTileM * kTileK * 2;
[[maybe_unused]] constexpr int kSBytes = kTileN * kScaleWords * 4;
[[maybe_unused]] constexpr int kZBytes = kTileN * kZpWords * 4;
[[maybe_unused]] constexpr bool kWgmma = NBITS_WGMMA != 0;
// wgmma reads the activation tile through 1024-byte 128B-swizzle atoms: every
// stage starts on a 1024-byte boundary, and the kernel aligns its dynamic
// shared memory up to one (kSmemSlack more bytes).
[[maybe_unused]] constexpr int kStageAlign = kWgmma ? 1024 : 16;
[[maybe_unused]] constexpr int kSmemSlack = kWgmma ? 1024 : 0;
[[maybe_unused]] constexpr int kStageBytes =
    (kWBytes + kABytes + kSBytes + kZBytes + kStageAlign - 1) / kStageAlign * kStageAlign;
[[maybe_unused]] constexpr int kSplitK = NBITS_SPLIT_K;
[[maybe_unused]] constexpr int kTilesPerSplit = (kTilesK + kSplitK - 1) / kSplitK;
[[maybe_unused]] constexpr int kEpiStride = kTileN + 4;  // floats per staged token row
[[maybe_unused]] constexpr int kEpiBytes = kWarpsK * kTileM * kEpiStride * 4;
[[maybe_unused]] constexpr int kProducerWarps = NBITS_PRODUCER_WARPS;
[[maybe_unused]] constexpr int kProducers = 32 * kProducerWarps;
[[maybe_unused]] constexpr int kBlockThreads = kThreads + kProducers;
[[maybe_unused]] constexpr bool kTma = NBITS_TMA != 0;
[[maybe_unused]] constexpr bool kStreamK = NBITS_STREAM_K != 0;  // see stream_k_gemm
[[maybe_unused]] constexpr bool kStreamKRounds = NBITS_STREAM_K_ROUNDS != 0;
[[maybe_unused]] constexpr int kPipelineBytes = kStages * kStageBytes > kEpiBytes ? kStages * kStageBytes : kEpiBytes;
// With producer warps or TMA each stage has a full and an empty mbarrier (TMA
// without producers uses only the full one), after the stages and the staged
// tile.
[[maybe_unused]] constexpr int kBarrierBytes = kProducerWarps > 0 || kTma ? 16 * kStages : 0;
[[maybe_unused]] constexpr int kSmemBytes = kPipelineBytes + kBarrierBytes + kSmemSlack;

static_assert(kWarpN % 16 == 0, "TILE_N / WARPS_N must be a multiple of 16");
static_assert(kWarpM % 8 == 0, "TILE_M / WARPS_M must be a multiple of 8");
static_assert(kUnits == 1 || kUnits == 2 || kUnits == 4,
    "TILE_K / WARPS_K / 32 must be 1, 2 or 4");
static_assert(kChunks >= 8, "TILE_K >= 64");
static_assert(8 * kUnits <= kBlockSize, "a thread's k range must lie in one block");
static_assert(kTileN % 32 == 0, "TILE_N multiple of 32");
static_assert(kStages >= 2, "at least two stages");
static_assert(kSplitK >= 1 && kSplitK <= 8, "NBITS_SPLIT_K is 1..8 (a portable cluster size)");
static_assert(kProducerWarps == 0 || (kWgmma && (kProducerWarps == 1 || kProducerWarps == 2 || kProducerWarps == 4)),
    "NBITS_PRODUCER_WARPS is 0, or 1, 2 or 4 with NBITS_WGMMA");
static_assert(!kTma || (kWgmma && kProducerWarps != 2 && kActAsync && kRowBytes % 16 == 0 && kTileM <= 256),
    "NBITS_TMA needs the wgmma main loop, 0, 1 or 4 producer warps, K % 8 == 0 and weight rows of whole 16 bytes");
static_assert(!kWgmma || ((kTileN == 128 || kTileN == 256) && kWarpsN == kTileN / 16 && kTileK == 64 &&
                          kWarpsM == 1 && kWarpsK == 1 && (kTileM == 64 || kTileM == 128 || kTileM == 256) &&
                          kStages >= 3),
    "NBITS_WGMMA needs TILE_N 128 or 256, WARPS TILE_N / 16 x 1 x 1, TILE_K 64, TILE_M 64, 128 or 256, STAGES >= 3");

// Physical 16-byte chunk of logical chunk `q` in token row `row`: a phase of
// 8 lanes (two token rows, t = 0..3) reads 8 different bank groups.
// wgmma: the 128B swizzle of its shared-memory descriptors, chunk q of row r
// at q ^ (r % 8) (rows 128 bytes apart from a 1024-byte-aligned stage).
__device__ __forceinline__ int act_chunk_swizzle(const int row, const int q)
{
    if (kWgmma) {
        return q ^ (row & 7);
    } else if (kUnits == 1) {
        return q ^ ((row & 1) << 2);
    } else if (kUnits == 2) {
        return q ^ (row & 1);
    } else {
        return q ^ ((q >> 2) & 3) ^ (row & 1);
    }
}

// Where the CTA's weight rows come from: one weight set, or the gate set for
// the first TILE_N / 2 rows and the up set for the rest.
template <bool kPaired>
struct WeightSource {
    const u8* b0;             // the weight set of the first TILE_N / 2 rows
    const u8* b1;             // paired: the set of the others
    const scale_t* scales0;
    const scale_t* scales1;
    const u8* zp0;
    const u8* zp1;
    int n0;  // first output column of the CTA
    int n;
    // NBITS_TMA: tensor maps of A ([M, K] elements) and of each set's weight
    // rows ([N, row bytes] bytes), kernel parameters.
    const TmaMap* act_map;
    const TmaMap* b0_map;
    const TmaMap* b1_map;

    // Selected by value, never by index, so the pointers stay in registers.
    __device__ __forceinline__ bool second(const int r) const
    {
        return kPaired && r >= kTileN / 2;
    }
    __device__ __forceinline__ const u8* b(const int r) const { return second(r) ? b1 : b0; }
    __device__ __forceinline__ const scale_t* scales(const int r) const
    {
        return second(r) ? scales1 : scales0;
    }
    __device__ __forceinline__ const u8* zp(const int r) const { return second(r) ? zp1 : zp0; }
    // Clamped column of CTA weight row r.
    __device__ __forceinline__ int column_of(const int r) const
    {
        const int c = n0 + (kPaired ? r % (kTileN / 2) : r);
        return c < n ? c : n - 1;
    }
};

// The source of one weight set's rows (n0 left to the CTA's tile).
__device__ __forceinline__ WeightSource<false> single_source(const u8* b, const scale_t* scales, const u8* zero_points,
                                                             const int n, const TmaMap* act_map, const TmaMap* b_map)
{
    WeightSource<false> src;
    src.b0 = src.b1 = b;
    src.scales0 = src.scales1 = scales;
    src.zp0 = src.zp1 = zero_points;
    src.act_map = act_map;
    src.b0_map = src.b1_map = b_map;
    src.n0 = 0;
    src.n = n;
    return src;
}

// The source of the paired node's gate and up rows (n0 left to the CTA's tile).
__device__ __forceinline__ WeightSource<true> paired_source(const u8* b_gate, const scale_t* scales_gate,
    const u8* zp_gate, const u8* b_up, const scale_t* scales_up, const u8* zp_up, const int n, const TmaMap* act_map,
    const TmaMap* gate_map, const TmaMap* up_map)
{
    WeightSource<true> src;
    src.b0 = b_gate;
    src.b1 = b_up;
    src.scales0 = scales_gate;
    src.scales1 = scales_up;
    src.zp0 = zp_gate;
    src.zp1 = zp_up;
    src.act_map = act_map;
    src.b0_map = gate_map;
    src.b1_map = up_map;
    src.n0 = 0;
    src.n = n;
    return src;
}

struct StageView {
    u8* w;      // [TILE_N][WROW] weight bytes
    u8* a;      // [TILE_M][CHUNKS] swizzled 16-byte activation chunks
    u8* s;      // [TILE_N][SW] scale words
    u8* z;      // [TILE_N][ZW] zero-point words
};

__device__ __forceinline__ StageView stage_view(u8* smem, const int stage)
{
    StageView v;
    v.w = smem + stage * kStageBytes;
    v.a = v.w + kWBytes;
    v.s = v.a + kABytes;
    v.z = v.s + kSBytes;
    return v;
}

// (column tile, token tile) of this CTA. Consecutive CTAs take the token
// tiles of a group of GROUP_N column tiles, so the CTAs resident at once
// read each weight tile from DRAM once and share it through L2 when the
// weights are larger than L2.
__device__ __forceinline__ int2 cta_tile()
{
    const int n_tiles = (int)gridDim.x;
    const int m_tiles = (int)gridDim.y;
    const int id = (int)blockIdx.y * n_tiles + (int)blockIdx.x;
    const int group = id / (NBITS_GROUP_N * m_tiles);
    const int first = group * NBITS_GROUP_N;
    const int width = n_tiles - first < NBITS_GROUP_N ? n_tiles - first : NBITS_GROUP_N;
    const int within = id - first * m_tiles;
    return make_int2(NBITS_FIRST_COLUMN_TILE + first + within % width, within / width);
}

// Copies word `word` of the 4-byte words that cover the bytes from `byte0` on
// of a byte array of `total` bytes (word-aligned down), reading nothing past
// the end: a whole word asynchronously, the array's last partial word (zero
// padded) and words past its end (zeros) with a plain shared store, which the
// stage's barrier orders like the copies.
__device__ __forceinline__ void cp_async_word(
    const u32 dst, const u8* base, const int byte0, const int total, const int word)
{
    const int at = (byte0 & ~3) + 4 * word;
    const int left = total - at;
    if (left >= 4) {
        cp_async<4>(dst, base + at, 4);
        return;
    }
    u32 value = 0;
    for (int i = 0; i < left; ++i) {
        value |= (u32)base[at + i] << (8 * i);
    }
    asm volatile("st.shared.u32 [%0], %1;\n" :: "r"(dst), "r"(value) : "memory");
}

// The copies of the k tiles into the stages by kLoaders threads, this one
// `loader` among them. Copy i of a kind goes to loader i % kLoaders, so every
// trip count is a compile-time constant. Where each copy of this thread reads
// at tile 0 is worked out once (the constructor), and a tile's copies add the
// tile's offset to it: rows past M read as zeros and columns past N as the
// last column, so only K's end depends on the tile, and only where K is not a
// multiple of TILE_K.
template <int kLoaders, bool kPaired>
struct StageLoader {
    // Weights: TILE_N rows x WROW bytes in kWCopy-byte pieces, row-major.
    static constexpr int kPieces = kWRowBytes / kWCopy;
    static constexpr int kWCopies = kTileN * kPieces;
    static constexpr int kWIters = (kWCopies + kLoaders - 1) / kLoaders;
    // Activations: TILE_M rows x CHUNKS chunks. A loader's chunks lie
    // kLoaders / CHUNKS rows apart at one chunk position: their sources differ
    // by a constant, and so do their swizzled places when that step keeps
    // row % 8 (act_chunk_swizzle). Otherwise (or when K % 8 != 0) each tile
    // works out its chunks.
    static constexpr int kACopies = kTileM * kChunks;
    static constexpr int kAIters = (kACopies + kLoaders - 1) / kLoaders;
    static constexpr int kARowStep = kLoaders / kChunks;
    static constexpr bool kActStrided =
        kActAsync && kLoaders % kChunks == 0 && kARowStep % 8 == 0 && kACopies % kLoaders == 0;
    // Scales and zero points of the blocks a tile touches: the words covering
    // them, [TILE_N][SW] and [TILE_N][ZW], row-major.
    static constexpr int kSCopies = kTileN * kScaleWords;
    static constexpr int kSIters = (kSCopies + kLoaders - 1) / kLoaders;
    static constexpr int kZw = kZpWords > 0 ? kZpWords : 1;
    static constexpr int kZCopies = kTileN * kZw;
    static constexpr int kZIters = kHasZp ? (kZCopies + kLoaders - 1) / kLoaders : 0;

    const act_t* a;
    const WeightSource<kPaired>& src;
    int m;
    int m0;
    int loader;
    const u8* w[kWIters];            // weight copy sources at tile 0
    const act_t* act;                // the first activation chunk's source at tile 0 (kActStrided)
    u32 act_rows;                    // bit it: activation copy it's row lies inside M (kActStrided)
    const u8* s_base[kSIters];       // the scale array of scale copy it
    int s_byte0[kSIters];            // the byte of its row's first scale
    const u8* z_base[kZIters > 0 ? kZIters : 1];
    int z_byte0[kZIters > 0 ? kZIters : 1];

    __device__ __forceinline__ StageLoader(const act_t* __restrict__ a_, const WeightSource<kPaired>& src_,
                                           const int m_, const int m0_, const int loader_)
        : a(a_), src(src_), m(m_), m0(m0_), loader(loader_)
    {
#pragma unroll
        for (int it = 0; it < kWIters; ++it) {
            const int i = min(loader + it * kLoaders, kWCopies - 1);
            const int r = i / kPieces;
            w[it] = src.b(r) + (long)src.column_of(r) * kRowBytes + (i % kPieces) * kWCopy;
        }
        const int row0 = m0 + loader / kChunks;
        act = a + (long)min(row0, m - 1) * kK + (loader % kChunks) * 8;
        act_rows = 0;
#pragma unroll
        for (int it = 0; it < kAIters; ++it) {
            act_rows |= (row0 + it * kARowStep < m ? 1u : 0u) << it;
        }
#pragma unroll
        for (int it = 0; it < kSIters; ++it) {
            const int r = min(loader + it * kLoaders, kSCopies - 1) / kScaleWords;
            s_base[it] = reinterpret_cast<const u8*>(src.scales(r));
            s_byte0[it] = src.column_of(r) * kKBlocks * kScaleBytes;
        }
#pragma unroll
        for (int it = 0; it < kZIters; ++it) {
            const int r = min(loader + it * kLoaders, kZCopies - 1) / kZw;
            z_base[it] = src.zp(r);
            z_byte0[it] = src.column_of(r) * kZpRowBytes;
        }
    }

    // Issues the copies of k tile `tile` into the stage at shared address
    // `stage` (generic pointer `stage_ptr`); kMetaOnly: only its scales and
    // zero points (the tensor memory accelerator copies the rest).
    template <bool kMetaOnly = false>
    __device__ __forceinline__ void load(const u32 stage, u8* stage_ptr, const int tile) const
    {
        if constexpr (!kMetaOnly) {
            load_weights_and_acts(stage, stage_ptr, tile);
        }
        const int kb0 = tile * kTileK / kBlockSize;
#pragma unroll
        for (int it = 0; it < kSIters; ++it) {
            const int i = loader + it * kLoaders;
            if (kSCopies % kLoaders == 0 || i < kSCopies) {
                cp_async_word(stage + kWBytes + kABytes + 4 * i, s_base[it], s_byte0[it] + kb0 * kScaleBytes,
                              src.n * kKBlocks * kScaleBytes, i % kScaleWords);
            }
        }
#pragma unroll
        for (int it = 0; it < kZIters; ++it) {
            const int i = loader + it * kLoaders;
            if (kZCopies % kLoaders == 0 || i < kZCopies) {
                cp_async_word(stage + kWBytes + kABytes + kSBytes + 4 * i, z_base[it],
                              z_byte0[it] + (kBits == 4 ? kb0 / 2 : kb0), src.n * kZpRowBytes, i % kZw);
            }
        }
    }

    __device__ __forceinline__ void load_weights_and_acts(const u32 stage, u8* stage_ptr, const int tile) const
    {
#pragma unroll
        for (int it = 0; it < kWIters; ++it) {
            const int i = loader + it * kLoaders;
            if (kWCopies % kLoaders == 0 || i < kWCopies) {
                const int off = tile * kWRowBytes;
                // Rows of whole tiles: every tile's bytes lie inside the row.
                const bool in = kRowBytes % kWRowBytes == 0 || off + (i % kPieces) * kWCopy < kRowBytes;
                cp_async<kWCopy>(stage + i * kWCopy, in ? w[it] + off : w[it], in ? kWCopy : 0);
            }
        }

        if constexpr (kActStrided) {
            const int r0 = loader / kChunks;
            const int q = loader % kChunks;
            const u32 dst0 = stage + kWBytes + r0 * (kTileK * 2) + act_chunk_swizzle(r0, q) * 16;
            const bool k_in = kK % kTileK == 0 || tile * kTileK + q * 8 < kK;
            const act_t* tile_act = act + tile * kTileK;
            if (act_rows == (1u << kAIters) - 1u) {  // every row inside M: no per-copy select
#pragma unroll
                for (int it = 0; it < kAIters; ++it) {
                    cp_async<16>(dst0 + it * kARowStep * (kTileK * 2), tile_act + (long)it * kARowStep * kK,
                                 k_in ? 16 : 0);
                }
            } else {
#pragma unroll
                for (int it = 0; it < kAIters; ++it) {
                    const bool in = k_in && ((act_rows >> it) & 1u);
                    cp_async<16>(dst0 + it * kARowStep * (kTileK * 2),
                                 in ? tile_act + (long)it * kARowStep * kK : a, in ? 16 : 0);
                }
            }
        } else {
#pragma unroll
            for (int it = 0; it < kAIters; ++it) {
                const int i = loader + it * kLoaders;
                if (kACopies % kLoaders == 0 || i < kACopies) {
                    const int r = i / kChunks;
                    const int q = i % kChunks;
                    const int row = m0 + r;
                    const int k = tile * kTileK + q * 8;
                    const int dst = kWBytes + r * (kTileK * 2) + act_chunk_swizzle(r, q) * 16;
                    if (kActAsync) {
                        const bool in = row < m && k < kK;
                        cp_async<16>(stage + dst, in ? a + (long)row * kK + k : a, in ? 16 : 0);
                    } else {
                        act_t* d = reinterpret_cast<act_t*>(stage_ptr + dst);
#pragma unroll
                        for (int e = 0; e < 8; ++e) {
                            d[e] = (row < m && k + e < kK) ? a[(long)row * kK + k + e] : to_act(0.0f);
                        }
                    }
                }
            }
        }
    }
};

// Dequantisation constants of CTA weight row `r` for the block this thread's
// k range of tile `tile` lies in.
template <bool kPaired>
__device__ __forceinline__ DequantConst row_const(
    const StageView& st, const WeightSource<kPaired>& src, const int r, const int tile,
    const int block_in_tile)
{
    const int col = src.column_of(r);
    const int kb0 = tile * kTileK / kBlockSize;
    const int e0 = col * kKBlocks + kb0;
    const int s_off = ((e0 * kScaleBytes) & 3) + block_in_tile * kScaleBytes;
    const scale_t s = *reinterpret_cast<const scale_t*>(st.s + r * kScaleWords * 4 + s_off);
    int zp = kDefaultZp;
    if (kHasZp) {
        const int block = kb0 + block_in_tile;
        if (kBits == 4) {
            const int z0 = col * kZpRowBytes + kb0 / 2;
            const int z_off = (z0 & 3) + (block / 2 - kb0 / 2);
            zp = (st.z[r * kZpWords * 4 + z_off] >> (4 * (block & 1))) & 15;
        } else {
            const int z0 = col * kKBlocks + kb0;
            zp = st.z[r * kZpWords * 4 + (z0 & 3) + block_in_tile];
        }
    }
    return make_dequant_const(s, zp);
}

template <int kWords>
__device__ __forceinline__ void load_words(u32 (&w)[kWords], const u8* p)
{
    if (kWords % 4 == 0) {
#pragma unroll
        for (int i = 0; i < kWords; i += 4) {
            const uint4 v = *reinterpret_cast<const uint4*>(p + 4 * i);
            w[i] = v.x; w[i + 1] = v.y; w[i + 2] = v.z; w[i + 3] = v.w;
        }
    } else if (kWords == 2) {
        const uint2 v = *reinterpret_cast<const uint2*>(p);
        w[0] = v.x; w[1] = v.y;
    } else {
#pragma unroll
        for (int i = 0; i < kWords; ++i) {
            w[i] = reinterpret_cast<const u32*>(p)[i];
        }
    }
}

// A fragment of k step 2j + h: slot pair {2t, 2t+1} = k pair 2h of unit j,
// {2t+8, 2t+9} = pair 2h + 1; rows g and g + 8.
template <int j, int h>
__device__ __forceinline__ void weight_fragment(
    u32 (&frag)[4], const u32 (&lo)[kThreadWords], const u32 (&hi)[kThreadWords],
    const DequantConst c_lo, const DequantConst c_hi, const u32 step)
{
    const u32 lo0 = lo[j * kUnitWords];
    const u32 hi0 = hi[j * kUnitWords];
    const u32 lo1 = kBits == 4 ? lo0 >> 4 : lo[j * kUnitWords + kUnitWords - 1];
    const u32 hi1 = kBits == 4 ? hi0 >> 4 : hi[j * kUnitWords + kUnitWords - 1];
    frag[0] = dequant_pair<2 * h>(lo0, lo1, c_lo, step);
    frag[1] = dequant_pair<2 * h>(hi0, hi1, c_hi, step);
    frag[2] = dequant_pair<2 * h + 1>(lo0, lo1, c_lo, step);
    frag[3] = dequant_pair<2 * h + 1>(hi0, hi1, c_hi, step);
}

// Activation chunk of unit j for token fragment f: registers 0, 1 are the B
// fragment of step 2j, registers 2, 3 that of step 2j + 1.
template <int j>
__device__ __forceinline__ void act_fragment(
    u32 (&b)[4], const StageView& st, const int f, const int wm, const int wk, const int g,
    const int t)
{
    const int row = wm * kWarpM + f * 8 + g;
    const int q = wk * (kWarpK / 8) + t * kUnits + j;
    const uint4 v = *reinterpret_cast<const uint4*>(
        st.a + row * (kTileK * 2) + act_chunk_swizzle(row, q) * 16);
    b[0] = v.x; b[1] = v.y; b[2] = v.z; b[3] = v.w;
}

// Both k steps of unit j. The operand needing fewer registers for the whole
// warp tile is materialised first and the other streamed: A fragments (8
// registers per 16 weight rows) or B fragments (4 per 8 tokens).
template <int j>
__device__ __forceinline__ void compute_unit(
    float (&acc)[kFragsN][kFragsM][4],
    const StageView& st,
    const u32 (&words)[kFragsN][2][kThreadWords],
    const DequantConst (&consts)[kFragsN][2], const u32 step,
    const int wm, const int wk, const int g, const int t)
{
    if (kFragsN * 8 <= kFragsM * 4) {
        u32 afrag[kFragsN][2][4];
#pragma unroll
        for (int i = 0; i < kFragsN; ++i) {
            weight_fragment<j, 0>(afrag[i][0], words[i][0], words[i][1], consts[i][0], consts[i][1], step);
            weight_fragment<j, 1>(afrag[i][1], words[i][0], words[i][1], consts[i][0], consts[i][1], step);
        }
#pragma unroll
        for (int f = 0; f < kFragsM; ++f) {
            u32 b[4];
            act_fragment<j>(b, st, f, wm, wk, g, t);
#pragma unroll
            for (int i = 0; i < kFragsN; ++i) {
                mma_16816(acc[i][f], afrag[i][0], b[0], b[1]);
                mma_16816(acc[i][f], afrag[i][1], b[2], b[3]);
            }
        }
    } else {
        u32 bfrag[kFragsM][4];
#pragma unroll
        for (int f = 0; f < kFragsM; ++f) {
            act_fragment<j>(bfrag[f], st, f, wm, wk, g, t);
        }
#pragma unroll
        for (int i = 0; i < kFragsN; ++i) {
            u32 afrag[4];
            weight_fragment<j, 0>(afrag, words[i][0], words[i][1], consts[i][0], consts[i][1], step);
#pragma unroll
            for (int f = 0; f < kFragsM; ++f) {
                mma_16816(acc[i][f], afrag, bfrag[f][0], bfrag[f][1]);
            }
            weight_fragment<j, 1>(afrag, words[i][0], words[i][1], consts[i][0], consts[i][1], step);
#pragma unroll
            for (int f = 0; f < kFragsM; ++f) {
                mma_16816(acc[i][f], afrag, bfrag[f][2], bfrag[f][3]);
            }
        }
    }
}

template <bool kPaired>
__device__ __forceinline__ void compute_stage(
    float (&acc)[kFragsN][kFragsM][4],
    const StageView& st,
    const WeightSource<kPaired>& src,
    const int tile)
{
    const int lane = (int)threadIdx.x & 31;
    const int warp = (int)threadIdx.x >> 5;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int wk = warp / (kWarpsN * kWarpsM);
    const int wn = warp % kWarpsN;
    const int wm = (warp / kWarpsN) % kWarpsM;
    const int k_in_tile = wk * kWarpK + t * kUnits * 8;
    const int block_in_tile = kBlockSize < kTileK ? k_in_tile / kBlockSize : 0;
    const u32 step = held_step(src.n);

    u32 words[kFragsN][2][kThreadWords];
    DequantConst consts[kFragsN][2];
#pragma unroll
    for (int i = 0; i < kFragsN; ++i) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int r = wn * kWarpN + i * 16 + g + 8 * half;
            load_words(words[i][half], st.w + r * kWRowBytes + k_in_tile * kBits / 8);
            consts[i][half] = row_const(st, src, r, tile, block_in_tile);
        }
    }
    compute_unit<0>(acc, st, words, consts, step, wm, wk, g, t);
    if (kUnits > 1) {
        compute_unit<1 % kUnits>(acc, st, words, consts, step, wm, wk, g, t);
    }
    if (kUnits > 2) {
        compute_unit<2 % kUnits>(acc, st, words, consts, step, wm, wk, g, t);
        compute_unit<3 % kUnits>(acc, st, words, consts, step, wm, wk, g, t);
    }
}

// ------------------------------------------------------ sm_90a warpgroup MMA
// NBITS_WGMMA: the warpgroups of a CTA (two or four) each own 64 weight rows,
// the wgmma M dimension (warp w of the CTA holds rows 16 w .. 16 w + 15, laid
// out as the mma.sync A fragment), and all read the same activation stage;
// the tokens are its N (64 or 128 per instruction: one instruction for
// TILE_M 64 or 128, two for 256). The weights are dequantised into the A
// registers in natural k order (thread t takes k pair t of each 8-k unit, the
// same rounding as the mma.sync path), and the activations are read by wgmma
// from the stage itself through a K-major 128B-swizzle descriptor.

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int pending>
__device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(pending) : "memory");
}

// Shared-memory descriptors of a K-major operand with 128B swizzle: start
// address / 16 (bits 0-13), leading byte offset 16 (unused with this swizzle),
// stride byte offset 1024 (between 8-row groups), layout type 1
// (SWIZZLE_128B). The k16 steps of a stage differ only in their start, and
// shared memory ends below 256 KiB, so a step's descriptor is the stage's
// with its byte offset / 16 added to the start field, which never carries
// out of its 14 bits: one add a wgmma instead of encoding each address anew.
struct ActDescriptor {
    u32 low;  // start field | leading byte offset field
    __device__ __forceinline__ explicit ActDescriptor(const u32 address)
        : low(((address & 0x3FFFFu) >> 4) | (1u << 16))
    {
    }
    // The descriptor of the operand `offset` bytes (a multiple of 16) past the stage's.
    __device__ __forceinline__ unsigned long long at(const u32 offset) const
    {
        return (unsigned long long)(low + (offset >> 4)) | (64ull << 32) | (1ull << 62);
    }
};
// Under the 80-register cap of two CTAs an SM the stage's descriptor, live across the tile, made ptxas spill
// (the paired bf16 int8 kernel on 64-token tiles); there each wgmma encodes its own address.
[[maybe_unused]] constexpr bool kStageDescriptor = NBITS_MIN_CTAS == 1;

[[maybe_unused]] constexpr int kWgmmaN = kTileM < 128 ? kTileM : 128;      // tokens per wgmma
[[maybe_unused]] constexpr int kWgmmaHalves = kWgmma ? kTileM / kWgmmaN : 1;  // wgmmas per k16 step
[[maybe_unused]] constexpr int kWgmmaAcc = kWgmmaN / 2;                      // accumulators per wgmma

// d = A . B (+ d when `accumulate`) for a 64 x N x 16 step: A from
// registers, B (N tokens x 16 k, K-major) from shared memory.
__device__ __forceinline__ void wgmma_step(
    float (&d)[kWgmmaAcc], const u32 (&a)[4], const unsigned long long b, const bool accumulate)
{
    if constexpr (kWgmmaN == 64) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
#if NBITS_ACT_BF16
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
#else
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
#endif
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"((u32)accumulate)
            : "memory");
    } else {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
#if NBITS_ACT_BF16
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
#else
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
#endif
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
              "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
              "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
              "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
              "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"((u32)accumulate)
            : "memory");
    }
}

// Keeps the compiler from touching the accumulators across a wgmma wait.
__device__ __forceinline__ void fence_accumulators(float (&d)[kWgmmaAcc])
{
#pragma unroll
    for (int i = 0; i < kWgmmaAcc; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The first wgmma of a tile overwrites the accumulators (scale-d 0) rather than adding to zeros: ptxas serialises
// the wgmmas of a loop whose accumulators another instruction defines, as zeroing them would. So they start
// undefined, defined by no instruction.
__device__ __forceinline__ void undefined_accumulators(float (&acc)[kWgmmaHalves][kWgmmaAcc])
{
#pragma unroll
    for (int h = 0; h < kWgmmaHalves; ++h)
#pragma unroll
        for (int i = 0; i < kWgmmaAcc; ++i) asm volatile("" : "=f"(acc[h][i]));
}

// The dequantised pair t (k 2t, 2t + 1) of 8-k unit u of a weight row's stage
// words; int8: `select` is the byte offset 2 (t & 1) of the pair in its word;
// `step` is held_step().
__device__ __forceinline__ u32 dequant_unit_pair(const u32* words, const int u, const int t, const u32 select,
                                                 const DequantConst c, const u32 step)
{
    if (kBits == 4) {
        const u32 w = words[u];
        const u32 v = int4_magic_pair(w, w >> 4, t);
        return pair_fma(pair_fma(v, step, c.bias), c.scale, kPairNegZero);
    } else {
        const u32 w = (t >> 1) ? words[2 * u + 1] : words[2 * u];  // constant indices keep words in registers
        if (kBf16) {
            const float lo = __uint_as_float(__byte_perm(w, 0x4B000000u, select | 0x7440)) + __uint_as_float(c.bias);
            const float hi =
                __uint_as_float(__byte_perm(w, 0x4B000000u, (select + 1) | 0x7440)) + __uint_as_float(c.bias);
            u32 d;
            asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
            return pair_fma(d, c.scale, kPairNegZero);
        } else {
            const u32 v = __byte_perm(w, 0x64646464u, select | 0x4040 | ((select + 1) << 8));
            return pair_fma(pair_fma(v, step, c.bias), c.scale, kPairNegZero);
        }
    }
}

// k16 steps a wgmma commit group takes: their A fragments are dequantised
// first, then their wgmmas issued back to back. Not all four of a tile: the
// next tile's fragments would then reuse the registers of a group still in
// flight (in the same loop body), which ptxas does not guard against.
[[maybe_unused]] constexpr int kWgmmaGroupSteps = 2;

// One k tile: the A fragments of its four k16 steps from rows r and r + 8,
// two steps a commit group (kWgmmaGroupSteps). After issuing a group the warp
// waits only for the group before it (wait_group 1), so the tensor cores work
// on one group while the next is dequantised, also across the tile boundary:
// the last group of a tile is still in flight while the next tile's words
// and scales are read. The stage that group reads is therefore refilled one
// tile later than the mma.sync loop would (kCopiesAhead), and staged_k_tiles
// waits for every group before the epilogue reuses the stages.
template <bool kPaired>
__device__ __forceinline__ void compute_stage_wgmma(
    float (&acc)[kWgmmaHalves][kWgmmaAcc], const StageView& st, const u32 act_smem, const WeightSource<kPaired>& src,
    const int tile, const bool first_tile)
{
    const int lane = (int)threadIdx.x & 31;
    const int warp = (int)threadIdx.x >> 5;
    const int g = lane >> 2;
    const int t = lane & 3;
    // The stage rows of this thread's A fragment rows (16 warp + g and 8 on): those rows, or for the paired
    // stream-K GEMM the gate row and the up row of one column (the stage holds the gate rows, then the up rows),
    // so that each thread's accumulators hold both operands of its SwiGLU.
    constexpr bool kGateUpRows = kPaired && kStreamK;
    const int lo_row = kGateUpRows ? 8 * warp + g : 16 * warp + g;
    const int hi_row = kGateUpRows ? kTileN / 2 + 8 * warp + g : 16 * warp + g + 8;
    const u32 select = (u32)(2 * (t & 1));
    const u32 step = held_step(src.n);
    const ActDescriptor act(act_smem);
    constexpr int kRowWords = kWRowBytes / 4;
    u32 lo[kRowWords];
    u32 hi[kRowWords];
    load_words(lo, st.w + lo_row * kWRowBytes);
    load_words(hi, st.w + hi_row * kWRowBytes);
    DequantConst c_lo[kSpt];
    DequantConst c_hi[kSpt];
#pragma unroll
    for (int b = 0; b < kSpt; ++b) {
        c_lo[b] = row_const(st, src, lo_row, tile, b);
        c_hi[b] = row_const(st, src, hi_row, tile, b);
    }
#pragma unroll
    for (int s0 = 0; s0 < kTileK / 16; s0 += kWgmmaGroupSteps) {
        u32 frag[kWgmmaGroupSteps][4];
#pragma unroll
        for (int q = 0; q < kWgmmaGroupSteps; ++q) {
            const int s = s0 + q;
            const int b = kBlockSize >= kTileK ? 0 : 16 * s / kBlockSize;
            frag[q][0] = dequant_unit_pair(lo, 2 * s, t, select, c_lo[b], step);
            frag[q][1] = dequant_unit_pair(hi, 2 * s, t, select, c_hi[b], step);
            frag[q][2] = dequant_unit_pair(lo, 2 * s + 1, t, select, c_lo[b], step);
            frag[q][3] = dequant_unit_pair(hi, 2 * s + 1, t, select, c_hi[b], step);
        }
        wgmma_fence();
#pragma unroll
        for (int q = 0; q < kWgmmaGroupSteps; ++q) {
            const int s = s0 + q;
#pragma unroll
            for (int h = 0; h < kWgmmaHalves; ++h) {
                const u32 offset = 32 * s + h * kWgmmaN * 128;
                const unsigned long long b =
                    kStageDescriptor ? act.at(offset) : ActDescriptor(act_smem + offset).at(0);
                wgmma_step(acc[h], frag[q], b, s > 0 || !first_tile);
            }
        }
        wgmma_commit();
        wgmma_wait<1>();
    }
}

// This CTA's place in its split-K cluster (0 without split-K).
__device__ __forceinline__ int split_index()
{
    return kSplitK > 1 ? (int)blockIdx.z : 0;
}

// Ends a main loop: this CTA's partial tile is staged in shared memory and,
// with split-K, so is every other CTA's of the cluster, for the epilogue.
__device__ __forceinline__ void staged_tile_ready()
{
    if constexpr (kSplitK > 1) {
        cluster_sync();
    } else {
        __syncthreads();
    }
}

// This CTA's k tiles, first .. first + count - 1: all of them without split-K.
struct KTiles {
    int first;
    int count;
};
__device__ __forceinline__ KTiles cta_k_tiles()
{
    const int first = split_index() * kTilesPerSplit;
    return {first, min(kTilesK - first, kTilesPerSplit)};
}

// Tiles whose copies are in flight while one is computed: the stage refilled
// at tile i is that of tile i - 1 (mma.sync), or of tile i - 2 for wgmma,
// whose last step may still read tile i - 1's stage while tile i is computed.
[[maybe_unused]] constexpr int kCopiesAhead = kWgmma ? kStages - 2 : kStages - 1;

// A position in the ring of stages: the stage, and the parity of the ring's
// pass (a barrier phase), advanced a k tile at a time without a division.
struct StageRing {
    int stage = 0;
    u32 parity = 0;
    __device__ __forceinline__ void advance()
    {
        if (++stage == kStages) {
            stage = 0;
            parity ^= 1u;
        }
    }
};

// NBITS_TMA: a stage's full barrier completes on 2 arrivals of each producer
// thread (its scale and zero-point cp.asyncs landed; its plain shared stores
// released) and the first one's, which expects the tensor copies' bytes.
[[maybe_unused]] constexpr int kTmaFullArrivals = 2 * kProducers + 1;

// With a warpgroup of producers beside two computing ones, one CTA an SM
// (NBITS_TMA on 256-token tiles), the CTA starts with 168 registers a
// thread (ptxas's cap for 384 threads); the producers give all but 40 (56
// for the stream-K grid) of theirs to the computing warpgroups, whose 128
// accumulators a thread and dequantisation need more (at 168 ptxas
// serialises their wgmmas), and both
// return to 168 before the epilogue, which they share. Not for two CTAs an
// SM: ptxas gives a setmaxnreg.inc region no more registers than the
// launch's cap (80), below what a wgmma of 64 accumulators needs.
[[maybe_unused]] constexpr bool kSplitRegisters = kTma && kProducerWarps == 4 && NBITS_MIN_CTAS == 1;
static_assert(!kSplitRegisters || kBlockThreads == 384, "the register split assumes 384 threads");
template <bool kInc, int kCount>
__device__ __forceinline__ void set_max_registers()
{
    if constexpr (kSplitRegisters) {
        if constexpr (kInc) {
            asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(kCount) : "memory");
        } else {
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(kCount) : "memory");
        }
    }
}
[[maybe_unused]] constexpr int kLaunchRegisters = 168;
#ifndef NBITS_REGISTER_HANDBACK
#define NBITS_REGISTER_HANDBACK 0
#endif
// NBITS_REGISTER_HANDBACK: named barrier 2 hands the registers back. The computing warps arrive once they have
// released theirs, and the producers wait there before they take their own back (the stream-K producers, which
// share no epilogue, exit with what they kept). setmaxnreg.inc alone waits by retrying its allocation
// (USETMAXREG.TRY_ALLOC), a loop that issues on the schedulers the computing warps issue from; a barrier wait
// issues nothing.
[[maybe_unused]] constexpr bool kRegisterHandback = kSplitRegisters && NBITS_REGISTER_HANDBACK;
__device__ __forceinline__ void computing_registers_released()
{
    if constexpr (kRegisterHandback) {
        asm volatile("barrier.arrive 2, %0;\n" :: "n"(kBlockThreads) : "memory");
    }
}
__device__ __forceinline__ void wait_computing_registers_released()
{
    if constexpr (kRegisterHandback) {
        asm volatile("barrier.sync 2, %0;\n" :: "n"(kBlockThreads) : "memory");
    }
}
// The stream-K producers walk segments besides k tiles: at 40 registers the paired int8 kernel with zero points
// and blocks of 16 spilled, at 56 (the computing warpgroups at 224) none did.
[[maybe_unused]] constexpr int kProducerRegisters = kStreamK ? 56 : 40;
[[maybe_unused]] constexpr int kConsumerRegisters = kStreamK ? 224 : 232;
static_assert(!kSplitRegisters || kProducerRegisters * kProducers + kConsumerRegisters * kThreads ==
                                      kLaunchRegisters * kBlockThreads,
              "the register split hands over what the launch holds");

// NBITS_TMA: the tensor copies of k tile `tile` into the stage at shared
// address `stage`, completing on the mbarrier `bar` with the arrival that
// expects their bytes: the activation tile (128B-swizzled, as wgmma reads it)
// and the weight rows, one box a weight set.
template <bool kPaired>
__device__ __forceinline__ void tensor_copies(
    const u32 stage, const u32 bar, const int tile, const WeightSource<kPaired>& src, const int m0)
{
    mbarrier_arrive_expect_tx(bar, (u32)(kWBytes + kABytes));
    tma_load_2d(stage + kWBytes, src.act_map, tile * kTileK, m0, bar);
    tma_load_2d(stage, src.b0_map, tile * kWRowBytes, src.n0, bar);
    if (kPaired) {
        tma_load_2d(stage + kWBytes / 2, src.b1_map, tile * kWRowBytes, src.n0, bar);
    }
}

template <bool kPaired>
__device__ __forceinline__ void prefetch_tensor_maps(const WeightSource<kPaired>& src)
{
    prefetch_tma_map(src.act_map);
    prefetch_tma_map(src.b0_map);
    if (kPaired) {
        prefetch_tma_map(src.b1_map);
    }
}

// The producers of NBITS_TMA (a warp, or a warpgroup): for each k tile, once
// its stage is free, the first issues the tensor copies of the activation
// tile (128B-swizzled, as wgmma reads it) and of the weight rows (one box a
// weight set), and all copy the scales and zero points as the cp.async
// producers do: k tiles first .. first + count - 1, after `issued` tiles
// through the ring (`ring`: the stage of the next one and the parity of its
// empty barrier's previous phase); the first call also prefetches the
// tensor maps.
template <bool kPaired>
__device__ __forceinline__ void produce_by_tma(u8* smem, const u32 smem_base, const u32 full, const u32 empty,
    const int first, const int count, const act_t* __restrict__ a, const WeightSource<kPaired>& src, const int m,
    const int m0, StageRing& ring, int& issued)
{
    const int producer = (int)threadIdx.x - kThreads;
    const StageLoader<kProducers, kPaired> loader(a, src, m, m0, producer);
    if (producer == 0 && issued == 0) {
        prefetch_tensor_maps(src);
    }
#pragma unroll 1
    for (int i = 0; i < count; ++i) {
        if (issued + i >= kStages) {
            mbarrier_wait(empty + 8 * ring.stage, ring.parity);
        }
        const u32 stage = smem_base + ring.stage * kStageBytes;
        const u32 bar = full + 8 * ring.stage;
        const int tile = first + i;
        loader.template load<true>(stage, smem + ring.stage * kStageBytes, tile);
        cp_async_mbarrier_arrive(bar);
        mbarrier_arrive(bar);
        if (producer == 0) {
            tensor_copies(stage, bar, tile, src, m0);
        }
        ring.advance();
    }
    issued += count;
}

// The stages' full and empty mbarriers of the warp-specialised pipeline, initialised before any thread uses them.
__device__ __forceinline__ void init_stage_barriers(const u32 full, const u32 empty)
{
    if (threadIdx.x == 0) {
#pragma unroll
        for (int s = 0; s < kStages; ++s) {
            mbarrier_init(full + 8 * s, kTma ? kTmaFullArrivals : kProducers);
            mbarrier_init(empty + 8 * s, kThreads);
        }
        if (kTma) {
            fence_mbarrier_init();
        }
    }
    __syncthreads();
}

// NBITS_TMA without producer warps: thread 0 initialises the stages' full mbarriers (one arrival, its own, which
// expects the tensor copies' bytes) and prefetches the tensor maps, before any thread uses them.
template <bool kPaired>
__device__ __forceinline__ void init_tensor_copy_barriers(const u32 full, const WeightSource<kPaired>& src)
{
    if (threadIdx.x == 0) {
#pragma unroll
        for (int s = 0; s < kStages; ++s) {
            mbarrier_init(full + 8 * s, 1);
        }
        fence_mbarrier_init();
        prefetch_tensor_maps(src);
    }
    __syncthreads();
}

// The computing warps' side of the warp-specialised pipeline over k tiles first .. first + count - 1, `consumed`
// tiles after the ring's start: `ring` is the stage and full-barrier parity of the next tile, `released` the stage
// of the tile two before it, whose stage the next tile reports free (compute leaves only its tile's last wgmma
// in flight).
template <class Compute>
__device__ __forceinline__ void consume_k_tiles(const u32 smem_base, const u32 full, const u32 empty,
    const int first, const int count, StageRing& ring, StageRing& released, int& consumed, Compute compute)
{
#pragma unroll 1
    for (int i = 0; i < count; ++i, ++consumed) {
        if (consumed > 1) {
            mbarrier_arrive(empty + 8 * released.stage);
        }
        mbarrier_wait(full + 8 * ring.stage, ring.parity);
        if constexpr (!kTma) {
            // The copies (generic proxy) become visible to wgmma (async proxy). The tensor memory accelerator's
            // copies are the async proxy's own, complete once the full barrier is.
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        }
        compute(ring.stage, smem_base + ring.stage * kStageBytes, first + i);
        ring.advance();
        released.advance();
    }
}

// The warp-specialised pipeline (NBITS_PRODUCER_WARPS): the producer warps
// issue every tile's copies, up to kStages tiles ahead, and the consumer warps
// (the first kThreads threads) only compute, never waiting on a CTA barrier.
// Stage s has two mbarriers: `full` completes once its tile's copies have
// landed (each producer thread, kCopiesAhead tiles later, waits for its own
// copies of the tile with cp.async.wait_group and arrives, releasing them and
// its plain shared stores), `empty` once every consumer thread is done with
// it. compute leaves only its tile's last wgmma in flight, so once tile i is
// computed the stage of tile i - 1 is free, which the next iteration reports
// before it waits (there, not after compute, ptxas keeps the paired int8
// kernel within two CTAs' registers). Every consumer thread arrives on
// `empty`, each releasing its own reads: compute-sanitizer's racecheck
// follows that hand-over, but not one arrival a warp after __syncwarp (it
// reports the stage's refill as racing with the other lanes' reads). For
// staged_k_tiles, which returns alike.
template <bool kPaired, class Compute>
__device__ __forceinline__ void produced_k_tiles(u8* smem, const u32 smem_base, const int first, const int count,
    const act_t* __restrict__ a, const WeightSource<kPaired>& src, const int m, const int m0, Compute compute)
{
    const u32 full = smem_base + kPipelineBytes;
    const u32 empty = full + 8 * kStages;
    const int tid = (int)threadIdx.x;
    init_stage_barriers(full, empty);
    if (kTma && tid >= kThreads) {
        set_max_registers<false, kProducerRegisters>();
        StageRing ring;  // stage of tile i and the parity of its empty barrier's previous phase
        ring.parity = 1;
        int issued = 0;
        produce_by_tma(smem, smem_base, full, empty, first, count, a, src, m, m0, ring, issued);
        wait_computing_registers_released();
        set_max_registers<true, kLaunchRegisters>();
    } else if (tid >= kThreads) {
        const StageLoader<kProducers, kPaired> loader(a, src, m, m0, tid - kThreads);
        // Stage of tile i, the parity of its empty barrier's previous phase,
        // and the stage of tile i - (kCopiesAhead - 1), whose copies land next.
        StageRing ring;
        ring.parity = 1;
        StageRing landing;
        landing.stage = (kStages - (kCopiesAhead - 1)) % kStages;
#pragma unroll 1
        for (int i = 0; i < count; ++i) {
            if (i >= kStages) {
                mbarrier_wait(empty + 8 * ring.stage, ring.parity);
            }
            loader.load(smem_base + ring.stage * kStageBytes, smem + ring.stage * kStageBytes, first + i);
            cp_async_commit();
            if (i >= kCopiesAhead - 1) {
                cp_async_wait<kCopiesAhead - 1>();
                mbarrier_arrive(full + 8 * landing.stage);
            }
            ring.advance();
            landing.advance();
        }
        cp_async_wait<0>();
#pragma unroll 1
        for (int i = max(count - (kCopiesAhead - 1), 0); i < count; ++i) {
            mbarrier_arrive(full + 8 * (i % kStages));
        }
    } else {
        StageRing ring;
        StageRing released;
        released.stage = kStages - 2;
        int consumed = 0;
        set_max_registers<true, kConsumerRegisters>();
        consume_k_tiles(smem_base, full, empty, first, count, ring, released, consumed, compute);
        wgmma_wait<0>();
        set_max_registers<false, kLaunchRegisters>();
        computing_registers_released();
    }
    __syncthreads();
}

// The cp.async pipeline over this CTA's k tiles, shared by both main loops
// (with producer warps, produced_k_tiles): kCopiesAhead tiles in flight,
// compute(stage, its shared address, tile) once tile's copies have landed and
// every warp has finished the tile whose stage the next copies refill.
// Without split-K the CTA takes every k tile. Before returning every copy
// has landed and every wgmma has finished, so the epilogue may reuse the
// stages.
template <bool kPaired, class Compute>
__device__ __forceinline__ void staged_k_tiles(
    u8* smem, const act_t* __restrict__ a, const WeightSource<kPaired>& src, const int m, const int m0,
    Compute compute)
{
    const auto [first, count] = cta_k_tiles();
    const u32 smem_base = smem_addr(smem);
    if constexpr (kProducerWarps > 0) {
        produced_k_tiles(smem, smem_base, first, count, a, src, m, m0, compute);
        return;
    }
    const StageLoader<kThreads, kPaired> loader(a, src, m, m0, (int)threadIdx.x);
    // NBITS_TMA: thread 0 issues the tensor copies, which complete the stage's
    // full mbarrier; every thread copies its scales and zero points as without.
    const u32 full = smem_base + kPipelineBytes;
    if constexpr (kTma) {
        init_tensor_copy_barriers(full, src);
    }
    const auto tensor_copies_of = [&](const int stage, const int tile) {
        if constexpr (kTma) {
            if (threadIdx.x == 0) {
                tensor_copies(smem_base + stage * kStageBytes, full + 8 * stage, tile, src, m0);
            }
        }
    };
#pragma unroll
    for (int s = 0; s < kCopiesAhead; ++s) {
        if (s < count) {
            loader.template load<kTma>(smem_base + s * kStageBytes, smem + s * kStageBytes, first + s);
            tensor_copies_of(s, first + s);
        }
        cp_async_commit();
    }
    StageRing ring;      // the stage of tile i and its full barrier's parity
    StageRing refilled;  // the stage of tile i + kCopiesAhead
    refilled.stage = kCopiesAhead % kStages;
#pragma unroll 1
    for (int i = 0; i < count; ++i) {
        cp_async_wait<kCopiesAhead - 1>();
        if constexpr (kTma) {
            mbarrier_wait(full + 8 * ring.stage, ring.parity);
        }
        if (kWgmma) {
            // The copies (generic proxy) become visible to wgmma (async proxy).
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        }
        __syncthreads();
        const int next = i + kCopiesAhead;
        if (next < count) {
            loader.template load<kTma>(smem_base + refilled.stage * kStageBytes, smem + refilled.stage * kStageBytes,
                                       first + next);
            tensor_copies_of(refilled.stage, first + next);
        }
        cp_async_commit();
        compute(ring.stage, smem_base + ring.stage * kStageBytes, first + i);
        ring.advance();
        refilled.advance();
    }
    cp_async_wait<0>();
    if (kWgmma) {
        wgmma_wait<0>();
    }
    __syncthreads();
}

// The wgmma main loop, with gemm_mainloop's stages and epilogue layout.
template <bool kPaired>
__device__ __forceinline__ void gemm_mainloop_wgmma(
    u8* smem, const act_t* __restrict__ a, const WeightSource<kPaired>& src, const int m, const int m0)
{
    // Undefined until the first wgmma (undefined_accumulators); a CTA without k tiles (split-K) zeroes them after
    // the loop.
    float acc[kWgmmaHalves][kWgmmaAcc];
    undefined_accumulators(acc);

    const int first = cta_k_tiles().first;
    const auto compute = [&](const int stage, const u32 stage_address, const int tile) {
        compute_stage_wgmma(acc, stage_view(smem, stage), stage_address + kWBytes, src, tile, tile == first);
    };
    staged_k_tiles(smem, a, src, m, m0, compute);
#pragma unroll
    for (int h = 0; h < kWgmmaHalves; ++h) fence_accumulators(acc[h]);
    if (first >= kTilesK) {
#pragma unroll
        for (int h = 0; h < kWgmmaHalves; ++h)
#pragma unroll
            for (int i = 0; i < kWgmmaAcc; ++i) acc[h][i] = 0.0f;
    }

    const int lane = (int)threadIdx.x & 31;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int r = 16 * ((int)threadIdx.x >> 5) + g;
    float* epi = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int h = 0; h < kWgmmaHalves; ++h) {
        if (kProducerWarps > 0 && (int)threadIdx.x >= kThreads) {
            break;  // producer warps hold no accumulators
        }
#pragma unroll
        for (int c = 0; c < kWgmmaN / 8; ++c) {
            const int tok = kWgmmaN * h + 8 * c + 2 * t;
            epi[tok * kEpiStride + r] = acc[h][4 * c];
            epi[(tok + 1) * kEpiStride + r] = acc[h][4 * c + 1];
            epi[tok * kEpiStride + r + 8] = acc[h][4 * c + 2];
            epi[(tok + 1) * kEpiStride + r + 8] = acc[h][4 * c + 3];
        }
    }
    staged_tile_ready();
}

// NBITS_PROGRAMMATIC: the kernel before this one on the stream may still run
// until griddepcontrol.wait, so nothing it writes is read and nothing is
// written before. The CTAs here were placed and started meanwhile, on the SMs
// its CTAs left, instead of after its last CTA and a launch gap. The kernel
// after this one may do the same once every CTA here has started.
__device__ __forceinline__ void wait_for_prior_grid()
{
#if NBITS_PROGRAMMATIC
    asm volatile("griddepcontrol.launch_dependents;" : : : "memory");
    asm volatile("griddepcontrol.wait;" : : : "memory");
#endif
}

// The kernel's dynamic shared memory, aligned up to a stage boundary.
__device__ __forceinline__ u8* stage_memory(u8* raw)
{
    if (!kWgmma) {
        return raw;
    }
    return raw + ((1024u - (smem_addr(raw) & 1023u)) & 1023u);
}

// Main loop: accumulators of this thread's fragments over all of K, then the
// staged fp32 tile in shared memory: epi[wk][token][CTA weight row], ready
// for the epilogue (of every CTA of a split-K cluster).
template <bool kPaired>
__device__ __forceinline__ void gemm_mainloop(
    u8* smem, const act_t* __restrict__ a, const WeightSource<kPaired>& src,
    const int m, const int m0)
{
    if constexpr (kWgmma) {
        gemm_mainloop_wgmma(smem, a, src, m, m0);
        return;
    }
    float acc[kFragsN][kFragsM][4];
#pragma unroll
    for (int i = 0; i < kFragsN; ++i)
#pragma unroll
        for (int f = 0; f < kFragsM; ++f)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][f][e] = 0.0f;

    staged_k_tiles(smem, a, src, m, m0, [&](const int stage, u32, const int tile) {
        compute_stage(acc, stage_view(smem, stage), src, tile);
    });

    const int lane = (int)threadIdx.x & 31;
    const int warp = (int)threadIdx.x >> 5;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int wk = warp / (kWarpsN * kWarpsM);
    const int wn = warp % kWarpsN;
    const int wm = (warp / kWarpsN) % kWarpsM;
    float* epi = reinterpret_cast<float*>(smem) + wk * kTileM * kEpiStride;
#pragma unroll
    for (int i = 0; i < kFragsN; ++i) {
#pragma unroll
        for (int f = 0; f < kFragsM; ++f) {
            const int r = wn * kWarpN + i * 16 + g;
            const int tok = wm * kWarpM + f * 8 + 2 * t;
            epi[tok * kEpiStride + r] = acc[i][f][0];
            epi[(tok + 1) * kEpiStride + r] = acc[i][f][1];
            epi[tok * kEpiStride + r + 8] = acc[i][f][2];
            epi[(tok + 1) * kEpiStride + r + 8] = acc[i][f][3];
        }
    }
    staged_tile_ready();
}

// Sum of 8 staged values from CTA weight row r0 over the k-splitting warps
// and, with split-K, over the CTAs of the cluster in z order.
__device__ __forceinline__ void staged_values(
    float (&v)[8], const u8* smem, const int tok, const int r0)
{
    const float* epi = reinterpret_cast<const float*>(smem);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = 0.0f;
#pragma unroll
    for (int rank = 0; rank < kSplitK; ++rank) {
#pragma unroll
        for (int wk = 0; wk < kWarpsK; ++wk) {
            const float* p = epi + (wk * kTileM + tok) * kEpiStride + r0;
            float4 x;
            float4 y;
            if constexpr (kSplitK > 1) {
                x = cluster_load_f4(smem_addr(p), rank);
                y = cluster_load_f4(smem_addr(p + 4), rank);
            } else {
                x = *reinterpret_cast<const float4*>(p);
                y = *reinterpret_cast<const float4*>(p + 4);
            }
            v[0] += x.x; v[1] += x.y; v[2] += x.z; v[3] += x.w;
            v[4] += y.x; v[5] += y.y; v[6] += y.z; v[7] += y.w;
        }
    }
}

// The epilogue items (token, group of 8 columns) of an output tile this
// thread stores: with split-K the cluster's CTAs share them, each reading
// every CTA's partials.
__device__ __forceinline__ int first_epilogue_item() { return (int)threadIdx.x + split_index() * kBlockThreads; }
[[maybe_unused]] constexpr int kEpilogueStride = kBlockThreads * kSplitK;

// Y's element from its fp32 sum and its bias as NBITS_BIAS_MODE says: 1 plain, T(v + bias); 2 folded (an Add
// after the node), T(T(v) + bias).
__device__ __forceinline__ act_t with_bias(const float v, const float bias)
{
    return kBiasMode == 1 ? to_act(v + bias) : to_act(to_float(to_act(v)) + bias);
}

union Act8 {
    uint4 raw;
    act_t e[8];
};

// Eight consecutive floats from a 16-byte-aligned address, as two 128-bit loads.
__device__ __forceinline__ void load_float8(const float* p, float (&v)[8])
{
    const float4 lo = *reinterpret_cast<const float4*>(p);
    const float4 hi = *reinterpret_cast<const float4*>(p + 4);
    v[0] = lo.x; v[1] = lo.y; v[2] = lo.z; v[3] = lo.w;
    v[4] = hi.x; v[5] = hi.y; v[6] = hi.z; v[7] = hi.w;
}

// SwiGLU's silu(gate) * up in fp32, x / (1 + e^-x): e^-x overflows to inf
// for x < -88, giving -0.
__device__ __forceinline__ float swiglu(const float gate, const float up)
{
    return gate / (1.0f + expf(-gate)) * up;
}

// Writes 8 outputs of row `row` from column col0 (those < n), 16-byte
// vectorised when the row allows it.
__device__ __forceinline__ void store8(
    act_t* __restrict__ y, const Act8& out, const int row, const int col0, const int n)
{
    act_t* p = y + (long)row * n + col0;
    if ((n & 7) == 0 && col0 + 8 <= n) {
        *reinterpret_cast<uint4*>(p) = out.raw;
    } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            if (col0 + e < n) p[e] = out.e[e];
        }
    }
}

}  // namespace nbits_prefill

using namespace nbits_prefill;

// Split-K CTAs of one output tile form a cluster (compute_90+).
#if NBITS_SPLIT_K > 1
#define NBITS_CLUSTER __cluster_dims__(1, 1, NBITS_SPLIT_K)
#else
#define NBITS_CLUSTER
#endif

#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_prefill_gemm || NBITS_ENTRY_nbits_prefill_gate_up || \
    NBITS_ENTRY_nbits_prefill_gemm_tma || NBITS_ENTRY_nbits_prefill_gate_up_tma ||                             \
    NBITS_ENTRY_nbits_prefill_gemm_stream_k || NBITS_ENTRY_nbits_prefill_gate_up_stream_k
// The dynamic shared memory the GEMM entries need (SMEM above): a CPU test
// reads it from the PTX of each tile kind and checks the planner's formula.
extern "C" __constant__ int nbits_prefill_smem_bytes = kSmemBytes;
#endif

#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_prefill_gemm || NBITS_ENTRY_nbits_prefill_gemm_tma || \
    NBITS_ENTRY_nbits_prefill_gemm_stream_k
namespace nbits_prefill {
// The CTA's output tile of the entries nbits_prefill_gemm and nbits_prefill_gemm_tma.
__device__ __forceinline__ void prefill_gemm(const act_t* __restrict__ a, const u8* __restrict__ b,
    const scale_t* __restrict__ scales, const u8* __restrict__ zero_points, const act_t* __restrict__ bias,
    act_t* __restrict__ y, const int m, const int n, const int bias_row_stride, const TmaMap* act_map,
    const TmaMap* b_map)
{
    wait_for_prior_grid();
    extern __shared__ __align__(16) u8 nbits_prefill_smem[];
    u8* const smem = stage_memory(nbits_prefill_smem);
    WeightSource<false> src = single_source(b, scales, zero_points, n, act_map, b_map);
    const int2 tile = cta_tile();
    src.n0 = tile.x * kTileN;
    const int m0 = tile.y * kTileM;
    gemm_mainloop(smem, a, src, m, m0);

    constexpr int kGroups = kTileN / 8;
    for (int item = first_epilogue_item(); item < kTileM * kGroups; item += kEpilogueStride) {
        const int tok = item / kGroups;
        const int r0 = (item % kGroups) * 8;
        const int row = m0 + tok;
        const int col0 = src.n0 + r0;
        if (row >= m || col0 >= n) continue;
        float v[8];
        staged_values(v, smem, tok, r0);
        Act8 out;
        if (kBiasMode != 0) {
            const act_t* bp = bias + (long)row * bias_row_stride + col0;
            Act8 bv;
            if ((n & 7) == 0 && col0 + 8 <= n) {
                bv.raw = *reinterpret_cast<const uint4*>(bp);
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) bv.e[e] = col0 + e < n ? bp[e] : to_act(0.0f);
            }
#pragma unroll
            for (int e = 0; e < 8; ++e) out.e[e] = with_bias(v[e], to_float(bv.e[e]));
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) out.e[e] = to_act(v[e]);
        }
        store8(y, out, row, col0, n);
    }
    if constexpr (kSplitK > 1) {
        cluster_sync();  // the cluster has read this CTA's partials
    }
}
}  // namespace nbits_prefill
#endif

#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_prefill_gemm
// y[m, n] = a[m, K] . dequant(b)^T (+ bias). bias_row_stride: 0 broadcasts
// bias[n]; n reads a per-token [m, n] residual. Ignored when NBITS_BIAS_MODE
// is 0.
extern "C" __global__ void __launch_bounds__(kBlockThreads, NBITS_MIN_CTAS) NBITS_CLUSTER nbits_prefill_gemm(
    const act_t* __restrict__ a,          // align 2; align 16 when K%8==0
    const u8* __restrict__ b,             // align 8; align 16 when B_ROW%16==0
    const scale_t* __restrict__ scales,   // align 4
    const u8* __restrict__ zero_points,   // align 4
    const act_t* __restrict__ bias,       // align 2; align 16 when N%8==0
    act_t* __restrict__ y,                // align 2; align 16 when N%8==0
    const int m,
    const int n,
    const int bias_row_stride)
{
    prefill_gemm(a, b, scales, zero_points, bias, y, m, n, bias_row_stride, nullptr, nullptr);
}
#endif

#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_prefill_gemm_tma
// nbits_prefill_gemm with NBITS_TMA: act_map and b_map are the tensor maps
// of a and b (see NBITS_TMA).
extern "C" __global__ void __launch_bounds__(kBlockThreads, NBITS_MIN_CTAS) NBITS_CLUSTER nbits_prefill_gemm_tma(
    const act_t* __restrict__ a,          // align 16
    const u8* __restrict__ b,             // align 16
    const scale_t* __restrict__ scales,   // align 4
    const u8* __restrict__ zero_points,   // align 4
    const act_t* __restrict__ bias,       // align 2; align 16 when N%8==0
    act_t* __restrict__ y,                // align 2; align 16 when N%8==0
    const int m,
    const int n,
    const int bias_row_stride,
    const __grid_constant__ TmaMap act_map,
    const __grid_constant__ TmaMap b_map)
{
    prefill_gemm(a, b, scales, zero_points, bias, y, m, n, bias_row_stride, &act_map, &b_map);
}
#endif

#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_prefill_gemm_stream_k || NBITS_ENTRY_nbits_prefill_gate_up_stream_k
namespace nbits_prefill {
// NBITS_STREAM_K. A grid of one CTA per SM slot that takes one output tile each leaves the slots idle for the rest of
// the last, partial round of tiles (Qwen2.5-7B up at M = 512: 296 tiles of 256 tokens on 132 SMs, three rounds for 2.24
// rounds of work). Here the grid's G CTAs share the U units of work, an output tile's k tiles, evenly: units in order
// (tile-major, a column tile's row tiles one after another), CTA c taking units [c U / G, (c + 1) U / G). From 2G tiles
// on, only the first G..2G - 1 tiles (the last round and the part-filled one) are shared so and the rounds after them
// are whole tiles, CTA c taking tiles c, c + G, ... past the shared ones (nbits_stream_k::cta_work: a grid with every
// tile in progress at once rereads its weights from DRAM). A CTA walks its units as segments of one tile each, from its
// last unit back to its first, then its whole tiles, through one pipeline that runs on across them (a segment's own k
// tiles in order). A segment of every k tile of its tile stores it; one that ends before the tile's last k tile (a
// CTA's last segment in unit order, so the first it computes) stores its fp32 partial tile in the CTA's slot of
// `partials` and raises the CTA's flag; the segment of the tile's last k tile that starts past its first (a CTA's first
// in unit order, so the last of its shared units) waits for the flags of the CTAs before it that took the rest of the
// tile, adds their partials in CTA order (the same sums every run) and stores the tile. A CTA thus only waits for CTAs
// launched before it, whose partial is the first thing they compute, so the grid makes progress however few of its CTAs
// run at once (a GPU shared with other streams); with all of them resident (G is at most the CTAs an SM holds times the
// SMs) the partials are long done by the time their sum is due. The flags start zeroed (nbits_zero_words, the step
// before).
static_assert(!kStreamK || (kTma && (kProducerWarps == 4 || kProducerWarps == 0) && kSplitK == 1 &&
                              NBITS_FIRST_COLUMN_TILE == 0),
    "NBITS_STREAM_K needs NBITS_TMA with 4 producer warps or none, no split-K and no first column tile");
// Floats of a CTA's partial tile: each computing thread's accumulators.
[[maybe_unused]] constexpr int kPartialFloats = kThreads * kWgmmaHalves * kWgmmaAcc;

// A barrier of the computing warps only (named barrier 1; the producers never join it). Not .aligned: thread 0
// may arrive from a spin loop the rest of its warp skipped.
__device__ __forceinline__ void consumer_barrier()
{
    asm volatile("barrier.sync 1, %0;\n" :: "n"(kThreads) : "memory");
}

__device__ __forceinline__ void raise_flag(u32* flag)
{
    asm volatile("st.release.gpu.global.u32 [%0], %1;\n" :: "l"(flag), "r"(1u) : "memory");
}

__device__ __forceinline__ u32 flag_value(const u32* flag)
{
    u32 value;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(value) : "l"(flag) : "memory");
    return value;
}

// Y[row, col] = T(v) (+ bias as NBITS_BIAS_MODE says), inside M and N only.
__device__ __forceinline__ void store_output(act_t* __restrict__ y, const act_t* __restrict__ bias, const float v,
                                             const int row, const int col, const int m, const int n,
                                             const int bias_row_stride)
{
    if (row >= m || col >= n) {
        return;
    }
    y[(long)row * n + col] =
        kBiasMode != 0 ? with_bias(v, to_float(bias[(long)row * bias_row_stride + col])) : to_act(v);
}

// Where a segment's accumulators go: the tile's place, its k tiles, and the grid's units.
struct StreamSegment {
    int tile;
    int k0;
    int k1;
    int n0;
    int m0;
    int units;  // fewer than 2^31 (the plan's bound)
};

// The epilogue of a segment of this CTA (`cta`), every computing thread: its partial to its slot and flag, or the
// tile, summed with the partials of the CTAs that took the rest of its k tiles, to Y. A thread's accumulators
// (h, 4c .. 4c + 3) are its weight rows r, r + 8 at tokens tok, tok + 1 (paired: the gate and the up row of
// one column); in a slot they lie float4 (h, c) of every thread after another, so that each store and load of a
// warp is whole lines.
template <bool kPaired>
__device__ __forceinline__ void stream_segment_epilogue(float (&acc)[kWgmmaHalves][kWgmmaAcc],
    const StreamSegment& seg, const int cta, float* __restrict__ partials, u32* __restrict__ flags,
    act_t* __restrict__ y, const act_t* __restrict__ bias, const int m, const int n, const int bias_row_stride)
{
    const int tid = (int)threadIdx.x;
    if (nbits_stream_k::is_partial(seg.k1, kTilesK)) {
        float4* slot = reinterpret_cast<float4*>(partials + (long)cta * kPartialFloats);
#pragma unroll
        for (int h = 0; h < kWgmmaHalves; ++h)
#pragma unroll
            for (int c = 0; c < kWgmmaAcc / 4; ++c) {
                slot[(h * kWgmmaAcc / 4 + c) * kThreads + tid] =
                    make_float4(acc[h][4 * c], acc[h][4 * c + 1], acc[h][4 * c + 2], acc[h][4 * c + 3]);
            }
        __threadfence();
        consumer_barrier();
        if (tid == 0) {
            raise_flag(flags + cta);
        }
        return;
    }
    // The CTAs before this one whose units end inside the tile took the rest of it.
    const int tile_start = seg.tile * kTilesK;
    const int lowest = nbits_stream_k::lowest_contributor(cta, (int)gridDim.x, seg.units, tile_start);
    if (lowest < cta) {
        if (tid == 0) {
            for (int c = lowest; c < cta; ++c) {
                while (flag_value(flags + c) == 0) {
                    __nanosleep(64);
                }
            }
        }
        consumer_barrier();
    }
    // This CTA's accumulators plus the partials in CTA order (the same sums every run), a contributor's loads all
    // independent, so that as many are in flight as the registers beside the accumulators hold.
    constexpr int kVectors = kWgmmaHalves * kWgmmaAcc / 4;
#pragma unroll 1
    for (int other = lowest; other < cta; ++other) {
        const float4* slot = reinterpret_cast<const float4*>(partials + (long)other * kPartialFloats);
#pragma unroll
        for (int j = 0; j < kVectors; ++j) {
            const int h = j / (kWgmmaAcc / 4);
            const int c = j % (kWgmmaAcc / 4);
            const float4 p = __ldcg(slot + j * kThreads + tid);
            acc[h][4 * c] += p.x;
            acc[h][4 * c + 1] += p.y;
            acc[h][4 * c + 2] += p.z;
            acc[h][4 * c + 3] += p.w;
        }
    }
    const int lane = tid & 31;
    const int col = seg.n0 + (kPaired ? 8 : 16) * (tid >> 5) + (lane >> 2);
#pragma unroll
    for (int h = 0; h < kWgmmaHalves; ++h) {
#pragma unroll
        for (int c = 0; c < kWgmmaAcc / 4; ++c) {
            const int row = seg.m0 + kWgmmaN * h + 8 * c + 2 * (lane & 3);
            const float4 v = make_float4(acc[h][4 * c], acc[h][4 * c + 1], acc[h][4 * c + 2], acc[h][4 * c + 3]);
            if constexpr (kPaired) {
                store_output(y, bias, swiglu(v.x, v.z), row, col, m, n, bias_row_stride);
                store_output(y, bias, swiglu(v.y, v.w), row + 1, col, m, n, bias_row_stride);
            } else {
                store_output(y, bias, v.x, row, col, m, n, bias_row_stride);
                store_output(y, bias, v.y, row + 1, col, m, n, bias_row_stride);
                store_output(y, bias, v.z, row, col + 8, m, n, bias_row_stride);
                store_output(y, bias, v.w, row + 1, col + 8, m, n, bias_row_stride);
            }
        }
    }
}

// The stream-K GEMM (of the paired gate/up node too) over this CTA's units, an epilogue after each segment: with a
// warpgroup of producers (256-token tiles, one CTA an SM) the warp-specialised pipeline of produced_k_tiles, without
// (128-token tiles, two CTAs an SM) staged_k_tiles' pipeline, thread 0 issuing the tensor copies. Either runs on
// across segments, its copies kCopiesAhead k tiles ahead of the one computed, whatever segment they belong to.
// Instantiated by the stream-K entries only.
template <bool kPaired>
__device__ __forceinline__ void stream_k_gemm(u8* smem, const act_t* __restrict__ a, const WeightSource<kPaired>& src,
    const act_t* __restrict__ bias, act_t* __restrict__ y, const int m, const int n, const int bias_row_stride,
    float* __restrict__ partials, u32* __restrict__ flags)
{
    static_assert(!kPaired || kBiasMode == 0, "the paired node has no bias");
    wait_for_prior_grid();
    constexpr int kColumns = kPaired ? kTileN / 2 : kTileN;  // of Y, a tile
    const u32 smem_base = smem_addr(smem);
    const u32 full = smem_base + kPipelineBytes;
    [[maybe_unused]] const u32 empty = full + 8 * kStages;  // the producers' pipeline only
    if constexpr (kProducerWarps == 4) {
        init_stage_barriers(full, empty);
    } else {
        init_tensor_copy_barriers(full, src);
    }
    const int m_tiles = (m + kTileM - 1) / kTileM;
    const int cta = (int)blockIdx.x;
    const nbits_stream_k::Work work =
        nbits_stream_k::cta_work(cta, (int)gridDim.x, (n + kColumns - 1) / kColumns * m_tiles, kTilesK, kStreamKRounds);
    StreamSegment seg;
    seg.units = work.units;
    // Output tile t's first column of Y and first row (tile-major: a column tile's row tiles one after another).
    const auto first_column = [&](const int tile) { return tile / m_tiles * kColumns; };
    const auto first_row = [&](const int tile) { return tile % m_tiles * kTileM; };
    // Whether tile t lies inside N, worked out from N rather than kept.
    const auto in_grid = [&](const int tile) { return first_column(tile) < n; };
    WeightSource<kPaired> weights = src;
    const auto place = [&](const int tile, const int k0, const int k1) {
        seg.tile = tile;
        seg.k0 = k0;
        seg.k1 = k1;
        seg.n0 = first_column(tile);
        seg.m0 = first_row(tile);
        weights.n0 = seg.n0;
    };
    // Undefined until each segment's first wgmma overwrites them (undefined_accumulators).
    float acc[kWgmmaHalves][kWgmmaAcc];
    const auto segment_done = [&] {
        wgmma_wait<0>();
#pragma unroll
        for (int h = 0; h < kWgmmaHalves; ++h) fence_accumulators(acc[h]);
        stream_segment_epilogue<kPaired>(acc, seg, cta, partials, flags, y, bias, m, n, bias_row_stride);
    };
    if constexpr (kProducerWarps == 4) {
        if ((int)threadIdx.x >= kThreads) {
            set_max_registers<false, kProducerRegisters>();
            StageRing ring;  // stage of the next tile and the parity of its empty barrier's previous phase
            ring.parity = 1;
            int issued = 0;
            nbits_stream_k::for_each_work_segment(work, cta, (int)gridDim.x, kTilesK, kStreamKRounds, in_grid,
                                                  [&](const int tile, const int k0, const int k1) {
                place(tile, k0, k1);
                produce_by_tma(smem, smem_base, full, empty, k0, k1 - k0, a, weights, m, seg.m0, ring, issued);
            });
            if constexpr (!kRegisterHandback) {
                set_max_registers<true, kLaunchRegisters>();
            }
            return;
        }
        undefined_accumulators(acc);
        StageRing ring;
        StageRing released;
        released.stage = kStages - 2;
        int consumed = 0;
        set_max_registers<true, kConsumerRegisters>();
        nbits_stream_k::for_each_work_segment(work, cta, (int)gridDim.x, kTilesK, kStreamKRounds, in_grid,
                                              [&](const int tile, const int k0, const int k1) {
            place(tile, k0, k1);
            consume_k_tiles(smem_base, full, empty, k0, k1 - k0, ring, released, consumed,
                            [&](const int stage, const u32 stage_address, const int k) {
                                compute_stage_wgmma(acc, stage_view(smem, stage), stage_address + kWBytes, weights,
                                                    k, k == k0);
                            });
            segment_done();
        });
        set_max_registers<false, kLaunchRegisters>();
    } else {
        // The copies of the walk's k tile `issued` into `stage`, or none past the CTA's last.
        int issued = 0;
        const auto issue_next = [&](const int stage) {
            if (issued < work.end - work.begin ||
                (kStreamKRounds && in_grid(nbits_stream_k::whole_tile(work, cta, (int)gridDim.x, kTilesK, issued)))) {
                const nbits_stream_k::WalkItem item = nbits_stream_k::work_item(work, cta, (int)gridDim.x, kTilesK,
                                                                                issued);
                WeightSource<kPaired> item_src = src;
                item_src.n0 = first_column(item.tile);
                const int m0 = first_row(item.tile);
                const StageLoader<kThreads, kPaired> loader(a, item_src, m, m0, (int)threadIdx.x);
                loader.template load<true>(smem_base + stage * kStageBytes, smem + stage * kStageBytes, item.k);
                if (threadIdx.x == 0) {
                    tensor_copies(smem_base + stage * kStageBytes, full + 8 * stage, item.k, item_src, m0);
                }
                ++issued;
            }
            cp_async_commit();
        };
#pragma unroll 1
        for (int s = 0; s < kCopiesAhead; ++s) {
            issue_next(s);
        }
        undefined_accumulators(acc);
        StageRing ring;  // the stage of the computed k tile and its full barrier's parity
        // Segment by segment, the epilogue after each one's k tiles as in the producers' pipeline: an epilogue
        // inside the k loop, on a branch, made ptxas serialise the wgmmas (its C7518 note).
        nbits_stream_k::for_each_work_segment(work, cta, (int)gridDim.x, kTilesK, kStreamKRounds, in_grid,
                                              [&](const int tile, const int k0, const int k1) {
            place(tile, k0, k1);
#pragma unroll 1
            for (int k = k0; k < k1; ++k) {
                cp_async_wait<kCopiesAhead - 1>();
                mbarrier_wait(full + 8 * ring.stage, ring.parity);
                // The copies (generic proxy) become visible to wgmma (async proxy).
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                __syncthreads();
                // Into the stage kCopiesAhead after this one's (worked out, not kept: a ring of its own cost
                // the int4 kernel of blocks of 16 with zero points and fp32 scales a spill).
                const int refilled = ring.stage + kCopiesAhead;
                issue_next(refilled < kStages ? refilled : refilled - kStages);
                compute_stage_wgmma(acc, stage_view(smem, ring.stage),
                                    smem_base + ring.stage * kStageBytes + kWBytes, weights, k, k == k0);
                ring.advance();
            }
            segment_done();
        });
        cp_async_wait<0>();
    }
}
}  // namespace nbits_prefill
#endif

#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_prefill_gemm_stream_k
// nbits_prefill_gemm_tma over a stream-K grid (NBITS_STREAM_K; without it, nbits_prefill_gemm_tma itself):
// partials holds gridDim.x partial tiles of kPartialFloats floats, flags gridDim.x words, zero at launch.
extern "C" __global__ void __launch_bounds__(kBlockThreads, NBITS_MIN_CTAS) nbits_prefill_gemm_stream_k(
    const act_t* __restrict__ a,          // align 16
    const u8* __restrict__ b,             // align 16
    const scale_t* __restrict__ scales,   // align 4
    const u8* __restrict__ zero_points,   // align 4
    const act_t* __restrict__ bias,       // align 2
    act_t* __restrict__ y,                // align 2
    const int m,
    const int n,
    const int bias_row_stride,
    const __grid_constant__ TmaMap act_map,
    const __grid_constant__ TmaMap b_map,
    float* __restrict__ partials,         // align 16
    u32* __restrict__ flags)              // align 4
{
    if constexpr (kStreamK) {
        extern __shared__ __align__(16) u8 nbits_prefill_smem[];
        u8* const smem = stage_memory(nbits_prefill_smem);
        stream_k_gemm(smem, a, single_source(b, scales, zero_points, n, &act_map, &b_map), bias, y, m, n,
                      bias_row_stride, partials, flags);
    } else {
        prefill_gemm(a, b, scales, zero_points, bias, y, m, n, bias_row_stride, &act_map, &b_map);
    }
}
#endif

#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_zero_words
// words[0 .. count) = 0: the stream-K flags, before each run.
extern "C" __global__ void nbits_zero_words(u32* __restrict__ words, const int count)
{
    for (int i = (int)(blockIdx.x * blockDim.x + threadIdx.x); i < count; i += (int)(gridDim.x * blockDim.x)) {
        words[i] = 0;
    }
}
#endif

#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_prefill_gate_up || NBITS_ENTRY_nbits_prefill_gate_up_tma || \
    NBITS_ENTRY_nbits_prefill_gate_up_stream_k
namespace nbits_prefill {
// The CTA's output tile of the entries nbits_prefill_gate_up and nbits_prefill_gate_up_tma.
__device__ __forceinline__ void prefill_gate_up(const act_t* __restrict__ a, const u8* __restrict__ b_gate,
    const scale_t* __restrict__ scales_gate, const u8* __restrict__ zp_gate, const u8* __restrict__ b_up,
    const scale_t* __restrict__ scales_up, const u8* __restrict__ zp_up, act_t* __restrict__ y, const int m,
    const int n, const TmaMap* act_map, const TmaMap* gate_map, const TmaMap* up_map)
{
    static_assert(kTileN % 64 == 0, "paired TILE_N multiple of 64");
    wait_for_prior_grid();
    extern __shared__ __align__(16) u8 nbits_prefill_smem[];
    u8* const smem = stage_memory(nbits_prefill_smem);
    WeightSource<true> src =
        paired_source(b_gate, scales_gate, zp_gate, b_up, scales_up, zp_up, n, act_map, gate_map, up_map);
    const int2 tile = cta_tile();
    src.n0 = tile.x * (kTileN / 2);
    const int m0 = tile.y * kTileM;
    gemm_mainloop(smem, a, src, m, m0);

    constexpr int kGroups = kTileN / 2 / 8;
    for (int item = first_epilogue_item(); item < kTileM * kGroups; item += kEpilogueStride) {
        const int tok = item / kGroups;
        const int r0 = (item % kGroups) * 8;
        const int row = m0 + tok;
        const int col0 = src.n0 + r0;
        if (row >= m || col0 >= n) continue;
        float gate[8];
        float up[8];
        staged_values(gate, smem, tok, r0);
        staged_values(up, smem, tok, kTileN / 2 + r0);
        Act8 out;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            out.e[e] = to_act(swiglu(gate[e], up[e]));
        }
        store8(y, out, row, col0, n);
    }
    if constexpr (kSplitK > 1) {
        cluster_sync();  // the cluster has read this CTA's partials
    }
}
}  // namespace nbits_prefill
#endif

#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_prefill_gate_up
// y[m, n] = T(silu(a . gate^T) * (a . up^T)) for the two weight sets of a
// paired node (same K, N, bits, block size, scale type, zero-point presence),
// from the fp32 accumulators with one rounding at the end.
extern "C" __global__ void __launch_bounds__(kBlockThreads, NBITS_MIN_CTAS) NBITS_CLUSTER nbits_prefill_gate_up(
    const act_t* __restrict__ a,          // align 2; align 16 when K%8==0
    const u8* __restrict__ b_gate,        // align 8; align 16 when B_ROW%16==0
    const scale_t* __restrict__ scales_gate,  // align 4
    const u8* __restrict__ zp_gate,       // align 4
    const u8* __restrict__ b_up,          // align 8; align 16 when B_ROW%16==0
    const scale_t* __restrict__ scales_up,    // align 4
    const u8* __restrict__ zp_up,         // align 4
    act_t* __restrict__ y,                // align 2; align 16 when N%8==0
    const int m,
    const int n)
{
    prefill_gate_up(a, b_gate, scales_gate, zp_gate, b_up, scales_up, zp_up, y, m, n, nullptr, nullptr, nullptr);
}
#endif

#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_prefill_gate_up_tma
// nbits_prefill_gate_up with NBITS_TMA: the tensor maps of a, b_gate and b_up.
extern "C" __global__ void __launch_bounds__(kBlockThreads, NBITS_MIN_CTAS) NBITS_CLUSTER nbits_prefill_gate_up_tma(
    const act_t* __restrict__ a,          // align 16
    const u8* __restrict__ b_gate,        // align 16
    const scale_t* __restrict__ scales_gate,  // align 4
    const u8* __restrict__ zp_gate,       // align 4
    const u8* __restrict__ b_up,          // align 16
    const scale_t* __restrict__ scales_up,    // align 4
    const u8* __restrict__ zp_up,         // align 4
    act_t* __restrict__ y,                // align 2; align 16 when N%8==0
    const int m,
    const int n,
    const __grid_constant__ TmaMap act_map,
    const __grid_constant__ TmaMap gate_map,
    const __grid_constant__ TmaMap up_map)
{
    prefill_gate_up(a, b_gate, scales_gate, zp_gate, b_up, scales_up, zp_up, y, m, n, &act_map, &gate_map, &up_map);
}
#endif

#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_prefill_gate_up_stream_k
// nbits_prefill_gate_up_tma over a stream-K grid (NBITS_STREAM_K; without it, nbits_prefill_gate_up_tma itself),
// with partials and flags as nbits_prefill_gemm_stream_k's.
extern "C" __global__ void __launch_bounds__(kBlockThreads, NBITS_MIN_CTAS) nbits_prefill_gate_up_stream_k(
    const act_t* __restrict__ a,          // align 16
    const u8* __restrict__ b_gate,        // align 16
    const scale_t* __restrict__ scales_gate,  // align 4
    const u8* __restrict__ zp_gate,       // align 4
    const u8* __restrict__ b_up,          // align 16
    const scale_t* __restrict__ scales_up,    // align 4
    const u8* __restrict__ zp_up,         // align 4
    act_t* __restrict__ y,                // align 2
    const int m,
    const int n,
    const __grid_constant__ TmaMap act_map,
    const __grid_constant__ TmaMap gate_map,
    const __grid_constant__ TmaMap up_map,
    float* __restrict__ partials,         // align 16
    u32* __restrict__ flags)              // align 4
{
    // A paired node has no bias: a source compiled whole for a biased node holds this entry but never launches it.
    if constexpr (kStreamK && kBiasMode == 0) {
        extern __shared__ __align__(16) u8 nbits_prefill_smem[];
        u8* const smem = stage_memory(nbits_prefill_smem);
        stream_k_gemm(smem, a,
                      paired_source(b_gate, scales_gate, zp_gate, b_up, scales_up, zp_up, n, &act_map, &gate_map,
                                    &up_map),
                      nullptr, y, m, n, 0, partials, flags);
    } else {
        prefill_gate_up(a, b_gate, scales_gate, zp_gate, b_up, scales_up, zp_up, y, m, n, &act_map, &gate_map,
                        &up_map);
    }
}
#endif

#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_dequantize
// w[(c - n_begin) * K + k] = (q[c, k] - zp) * scale for columns c in
// [n_begin, n_begin + n_count) and k < K, rounded to act_t exactly as the
// fused kernels dequantise. The (column, 8-k unit) pairs are numbered row-major
// and each thread takes DEQ_UNITS of them, 32 apart, so every load (4 or 8
// bytes of B per lane) and every 16-byte store of a warp is contiguous.
namespace nbits_prefill {
[[maybe_unused]] constexpr int kDeqUnitsPerRow = (kK + 7) / 8;
[[maybe_unused]] constexpr int kDeqUnits = NBITS_DEQ_UNITS;
}  // namespace nbits_prefill

extern "C" __global__ void __launch_bounds__(NBITS_DEQ_THREADS) nbits_dequantize(
    const u8* __restrict__ b,             // align 4; align 8 when int8
    const scale_t* __restrict__ scales,   // element-aligned
    const u8* __restrict__ zero_points,   // align 1
    act_t* __restrict__ w,                // align 2; align 16 when K%8==0
    const int n_begin,
    const int n_count)
{
    const long first = ((long)blockIdx.x * (NBITS_DEQ_THREADS / 32) + threadIdx.x / 32)
        * (32 * kDeqUnits) + (threadIdx.x & 31);
    const long total = (long)n_count * kDeqUnitsPerRow;
    u32 words[kDeqUnits][kUnitWords];
    // All loads first, so each thread has DEQ_UNITS of them in flight.
#pragma unroll
    for (int u = 0; u < kDeqUnits; ++u) {
        const long unit = first + 32 * u;
        if (unit < total) {
            const int local = (int)(unit / kDeqUnitsPerRow);
            const int k0 = (int)(unit % kDeqUnitsPerRow) * 8;
            const u8* p = b + (long)(n_begin + local) * kRowBytes + k0 * kBits / 8;
            load_words(words[u], p);
        }
    }
#pragma unroll
    for (int u = 0; u < kDeqUnits; ++u) {
        const long unit = first + 32 * u;
        if (unit >= total) break;
        const int local = (int)(unit / kDeqUnitsPerRow);
        const int col = n_begin + local;
        const int k0 = (int)(unit % kDeqUnitsPerRow) * 8;
        const int block = k0 / kBlockSize;
        int zp = kDefaultZp;
        if (kHasZp) {
            zp = kBits == 4
                ? (zero_points[(long)col * kZpRowBytes + block / 2] >> (4 * (block & 1))) & 15
                : zero_points[(long)col * kKBlocks + block];
        }
        const DequantConst c = make_dequant_const(scales[(long)col * kKBlocks + block], zp);
        const u32 w0 = words[u][0];
        const u32 w1 = kBits == 4 ? w0 >> 4 : words[u][kUnitWords - 1];
        uint4 out;
        out.x = dequant_pair<0>(w0, w1, c, kPairInt4Step);
        out.y = dequant_pair<1>(w0, w1, c, kPairInt4Step);
        out.z = dequant_pair<2>(w0, w1, c, kPairInt4Step);
        out.w = dequant_pair<3>(w0, w1, c, kPairInt4Step);
        act_t* dst = w + (long)local * kK + k0;
        if (kK % 8 == 0) {
            *reinterpret_cast<uint4*>(dst) = out;
        } else {
            const act_t* e = reinterpret_cast<const act_t*>(&out);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                if (k0 + i < kK) dst[i] = e[i];
            }
        }
    }
}
#endif

#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_rmsnorm_rows
// out[r, k] = T((a[r, k] * inv_std[r]) * gamma[k]), inv_std = 1 / sqrt(mean_k
// a[r, k]^2 + epsilon), fp32 arithmetic (the fused decode norm's formula).
// One CTA per row.
extern "C" __global__ void __launch_bounds__(NBITS_NORM_THREADS) nbits_rmsnorm_rows(
    const act_t* __restrict__ a,          // align 2; align 16 when K%8==0
    const gamma_t* __restrict__ gamma,    // align 16 when K%8==0
    act_t* __restrict__ out,              // align 2; align 16 when K%8==0
    const int rows,
    const float epsilon)
{
    __shared__ float inv_std_shared;
    const int row = (int)blockIdx.x;
    if (row >= rows) return;
    const act_t* x = a + (long)row * kK;
    act_t* o = out + (long)row * kK;
    const int tid = (int)threadIdx.x;
    constexpr bool kVec = kK % 8 == 0;

    float ss = 0.0f;
    if (kVec) {
        for (int c = tid; c < kK / 8; c += NBITS_NORM_THREADS) {
            Act8 v;
            v.raw = *reinterpret_cast<const uint4*>(x + 8 * c);
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const float f = to_float(v.e[e]);
                ss += f * f;
            }
        }
    } else {
        for (int k = tid; k < kK; k += NBITS_NORM_THREADS) {
            const float f = to_float(x[k]);
            ss += f * f;
        }
    }
    ss = block_sum(ss);
    if (tid == 0) {
        inv_std_shared = 1.0f / sqrtf(ss / (float)kK + epsilon);
    }
    __syncthreads();
    const float inv_std = inv_std_shared;

    if (kVec) {
        for (int c = tid; c < kK / 8; c += NBITS_NORM_THREADS) {
            Act8 v;
            v.raw = *reinterpret_cast<const uint4*>(x + 8 * c);
            float gm[8];
            if (sizeof(gamma_t) == 4) {
                load_float8(reinterpret_cast<const float*>(gamma + 8 * c), gm);
            } else {
                Act8 gv;
                gv.raw = *reinterpret_cast<const uint4*>(gamma + 8 * c);
#pragma unroll
                for (int e = 0; e < 8; ++e) gm[e] = to_float(gv.e[e]);
            }
            Act8 r;
#pragma unroll
            for (int e = 0; e < 8; ++e) r.e[e] = to_act((to_float(v.e[e]) * inv_std) * gm[e]);
            *reinterpret_cast<uint4*>(o + 8 * c) = r.raw;
        }
    } else {
        for (int k = tid; k < kK; k += NBITS_NORM_THREADS) {
            o[k] = to_act((to_float(x[k]) * inv_std) * to_float(gamma[k]));
        }
    }
}
#endif

#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_bias_rows || NBITS_ENTRY_nbits_silu_mul_rows
// The elementwise epilogues walk rows x n elements of Y in units of 8
// consecutive elements of one row, a grid-stride loop of them: one division
// per unit, in 32 bits wherever the unit count allows. A unit whose rows are
// 16-byte aligned moves as one uint4 (an Act8).
namespace nbits_prefill {
constexpr int kRowUnit = sizeof(Act8) / sizeof(act_t);

template <typename Index, typename Visit>
__device__ __forceinline__ void walk_row_units(int rows, int n, Visit visit)
{
    const Index per_row = (Index)((n + kRowUnit - 1) / kRowUnit);
    const Index total = (Index)rows * per_row;
    const Index stride = (Index)gridDim.x * blockDim.x;
    for (Index u = (Index)blockIdx.x * blockDim.x + threadIdx.x; u < total; u += stride) {
        const Index r = u / per_row;
        visit((long)r, (int)(u - r * per_row) * kRowUnit);
    }
}

template <typename Visit>
__device__ __forceinline__ void for_each_row_unit(int rows, int n, Visit visit)
{
    const unsigned long long units = (unsigned long long)rows * ((n + kRowUnit - 1) / kRowUnit);
    if (units + (unsigned long long)gridDim.x * blockDim.x <= 0xffffffffull) {
        walk_row_units<unsigned>(rows, n, visit);
    } else {
        walk_row_units<unsigned long long>(rows, n, visit);
    }
}

__device__ __forceinline__ bool aligned16(const void* p)
{
    return (reinterpret_cast<unsigned long long>(p) & 15) == 0;
}

// out[i] = op(out[i], in[i]) for the unit of `count` elements at out and in,
// as uint4 loads and stores when `whole` (16-byte aligned, 8 elements).
template <typename Op>
__device__ __forceinline__ void update_unit(act_t* out, const act_t* in, int count, bool whole, Op op)
{
    if (whole) {
        Act8 o;
        Act8 v;
        o.raw = *reinterpret_cast<const uint4*>(out);
        v.raw = *reinterpret_cast<const uint4*>(in);
#pragma unroll
        for (int i = 0; i < kRowUnit; ++i) {
            o.e[i] = op(o.e[i], v.e[i]);
        }
        *reinterpret_cast<uint4*>(out) = o.raw;
    } else {
        for (int i = 0; i < count; ++i) {
            out[i] = op(out[i], in[i]);
        }
    }
}
}  // namespace nbits_prefill
#endif

#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_bias_rows
// y[r, c] = T(y[r, c] + bias[r * bias_row_stride + c]) for r < rows, c < n,
// with Y's rows ldy elements apart: the bias of the dequantise + cuBLASLt
// route where cuBLASLt's broadcast epilogue does not apply: a per-token bias.
extern "C" __global__ void nbits_bias_rows(
    act_t* __restrict__ y,                // align 2
    const act_t* __restrict__ bias,       // align 2
    const int rows,
    const int n,
    const int ldy,
    const int bias_row_stride)
{
    using namespace nbits_prefill;
    const bool vector = n % kRowUnit == 0 && ldy % kRowUnit == 0 && bias_row_stride % kRowUnit == 0 &&
                        aligned16(y) && aligned16(bias);
    for_each_row_unit(rows, n, [&](long r, int c) {
        update_unit(y + r * ldy + c, bias + r * bias_row_stride + c, min(kRowUnit, n - c), vector,
                    [](act_t out, act_t b) { return to_act(to_float(out) + to_float(b)); });
    });
}
#endif

#if NBITS_ALL_ENTRIES || NBITS_ENTRY_nbits_silu_mul_rows
// y[r, c] = T(swiglu(gate[r, c], up[r, c])) for r < rows, c < n, the fp32
// gate and up projections' rows n elements apart and Y's ldy apart: the
// SwiGLU of a paired node on the dequantise + cuBLASLt route, one rounding
// like nbits_prefill_gate_up's (projections rounded to act_t first would put
// three roundings in Y, past the float64 oracle's bound for fp16).
extern "C" __global__ void nbits_silu_mul_rows(
    const float* __restrict__ gate,       // align 4
    const float* __restrict__ up,         // align 4
    act_t* __restrict__ y,                // align 2
    const int rows,
    const int n,
    const int ldy)
{
    using namespace nbits_prefill;
    const bool vector =
        n % kRowUnit == 0 && ldy % kRowUnit == 0 && aligned16(y) && aligned16(gate) && aligned16(up);
    for_each_row_unit(rows, n, [&](long r, int c) {
        const float* g = gate + r * n + c;
        const float* u = up + r * n + c;
        act_t* out = y + r * ldy + c;
        if (vector) {
            float gf[8];
            float uf[8];
            load_float8(g, gf);
            load_float8(u, uf);
            Act8 o;
#pragma unroll
            for (int i = 0; i < kRowUnit; ++i) {
                o.e[i] = to_act(swiglu(gf[i], uf[i]));
            }
            *reinterpret_cast<uint4*>(out) = o.raw;
        } else {
            const int count = min(kRowUnit, n - c);
            for (int i = 0; i < count; ++i) {
                out[i] = to_act(swiglu(g[i], u[i]));
            }
        }
    });
}
#endif
