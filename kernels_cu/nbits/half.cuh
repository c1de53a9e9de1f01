// The fp16 and bf16 types and intrinsics nbits' kernels use, under the names
// and signatures of cuda_fp16.h / cuda_bf16.h, so NVRTC needs no CUDA toolkit
// include directory and parses these few hundred lines instead of the
// toolkit's thousands. Every function emits the inline PTX the toolkit's
// emits for the same target, text included, so a kernel computes the same
// bits with either header; that keeps the kernels bit-exact with the
// originals, which include the toolkit headers. A kernel written against
// this header also compiles against the toolkit's.
//
// fp16 needs sm_53 (f16 arithmetic); bf16 is provided from sm_80 on
// (cvt.rn.bf16.f32, fma.rn.bf16x2), where the toolkit uses native bf16 PTX.
//
// The functions are `static __device__`, not __forceinline__: under NVRTC the
// toolkit's are ordinary device functions (their bodies come precompiled from
// NVRTC's builtins library) that the optimizer inlines where it chooses.
// Forcing the inlining moves code in some kernels (on compute_100, a
// conversion duplicated into both branches of an if), so their PTX would no
// longer match the originals'.
#pragma once

// asm operands: the bits of a value as the "h" (16-bit) and "r" (32-bit)
// constraints take them. Macros, as in the toolkit headers: a helper
// function changes the optimizer's inlining costs and with them the PTX.
// #undef'd at the end of this header.
#define NBITS_BITS16(value) (*reinterpret_cast<unsigned short*>(&(value)))
#define NBITS_CONST_BITS16(value) (*reinterpret_cast<const unsigned short*>(&(value)))
#define NBITS_BITS32(value) (*reinterpret_cast<unsigned int*>(&(value)))
#define NBITS_CONST_BITS32(value) (*reinterpret_cast<const unsigned int*>(&(value)))

// ---------------------------------------------------------------- fp16
// Skipped where cuda_fp16.h was included first: its definitions are the same.
#if !defined(__CUDA_FP16_H__)

struct __align__(2) __half {
    __half() = default;

protected:
    unsigned short __x;  // the fp16 bits
};

// Low half in the low 16 bits, as in a u32 word of two fp16 values. Copies
// move the pair as one 32-bit word, as cuda_fp16.h's do: a member-wise copy
// would split it into two 16-bit registers and change the PTX.
struct __align__(4) __half2 {
    __half x;
    __half y;

    __half2() = default;
    __device__ __half2(const __half2& other)
    {
        NBITS_BITS32(*this) = NBITS_CONST_BITS32(other);
    }
    __device__ __half2& operator=(const __half2& other)
    {
        NBITS_BITS32(*this) = NBITS_CONST_BITS32(other);
        return *this;
    }
};

static __device__ __half __float2half_rn(const float a)
{
    __half result;
    asm("{  cvt.rn.f16.f32 %0, %1;}\n" : "=h"(NBITS_BITS16(result)) : "f"(a));
    return result;
}

static __device__ __half __float2half(const float a)
{
    return __float2half_rn(a);
}

static __device__ float __half2float(const __half a)
{
    float result;
    asm("{  cvt.f32.f16 %0, %1;}\n" : "=f"(result) : "h"(NBITS_CONST_BITS16(a)));
    return result;
}

// Rounds once and copies the fp16 value into both halves.
static __device__ __half2 __float2half2_rn(const float a)
{
    __half2 result;
    asm("{.reg .f16 low;\n"
        "  cvt.rn.f16.f32 low, %1;\n"
        "  mov.b32 %0, {low,low};}\n" : "=r"(NBITS_BITS32(result)) : "f"(a));
    return result;
}

// {fp16(a), fp16(b)}: the paired cvt names the high half's source first.
static __device__ __half2 __floats2half2_rn(const float a, const float b)
{
    __half2 result;
#if __CUDA_ARCH__ >= 800
    asm("{ cvt.rn.f16x2.f32 %0, %2, %1; }\n"
        : "=r"(NBITS_BITS32(result)) : "f"(a), "f"(b));
#else
    asm("{.reg .f16 low,high;\n"
        "  cvt.rn.f16.f32 low, %1;\n"
        "  cvt.rn.f16.f32 high, %2;\n"
        "  mov.b32 %0, {low,high};}\n" : "=r"(NBITS_BITS32(result)) : "f"(a), "f"(b));
#endif
    return result;
}

static __device__ __half2 __float22half2_rn(const float2 a)
{
    return __floats2half2_rn(a.x, a.y);
}

// mov.b32 {low,high} splits the pair into its two fp16 registers.
static __device__ float __low2float(const __half2 a)
{
    float result;
    asm("{.reg .f16 low,high;\n"
        "  mov.b32 {low,high},%1;\n"
        "  cvt.f32.f16 %0, low;}\n" : "=f"(result) : "r"(NBITS_CONST_BITS32(a)));
    return result;
}

static __device__ float __high2float(const __half2 a)
{
    float result;
    asm("{.reg .f16 low,high;\n"
        "  mov.b32 {low,high},%1;\n"
        "  cvt.f32.f16 %0, high;}\n" : "=f"(result) : "r"(NBITS_CONST_BITS32(a)));
    return result;
}

static __device__ float2 __half22float2(const __half2 a)
{
    const float low = __low2float(a);
    const float high = __high2float(a);
    return make_float2(low, high);
}

static __device__ __half __low2half(const __half2 a)
{
    __half result;
    asm("{.reg .f16 low,high;\n"
        " mov.b32 {low,high}, %1;\n"
        " mov.b16 %0, low;}" : "=h"(NBITS_BITS16(result)) : "r"(NBITS_CONST_BITS32(a)));
    return result;
}

static __device__ __half __high2half(const __half2 a)
{
    __half result;
    asm("{.reg .f16 low,high;\n"
        " mov.b32 {low,high}, %1;\n"
        " mov.b16 %0, high;}" : "=h"(NBITS_BITS16(result)) : "r"(NBITS_CONST_BITS32(a)));
    return result;
}

static __device__ __half2 __halves2half2(const __half low, const __half high)
{
    __half2 result;
    asm("{  mov.b32 %0, {%1,%2};}\n"
        : "=r"(NBITS_BITS32(result))
        : "h"(NBITS_CONST_BITS16(low)), "h"(NBITS_CONST_BITS16(high)));
    return result;
}

static __device__ __half2 __half2half2(const __half a)
{
    __half2 result;
    asm("{  mov.b32 %0, {%1,%1};}\n"
        : "=r"(NBITS_BITS32(result)) : "h"(NBITS_CONST_BITS16(a)));
    return result;
}

// add and mul carry no rounding suffix, as in cuda_fp16.h: ptxas may then
// contract a mul feeding an add into an fma, exactly as for the toolkit's.
static __device__ __half2 __hadd2(const __half2 a, const __half2 b)
{
    __half2 result;
    asm("{add.f16x2 %0,%1,%2;\n}"
        : "=r"(NBITS_BITS32(result)) : "r"(NBITS_CONST_BITS32(a)), "r"(NBITS_CONST_BITS32(b)));
    return result;
}

static __device__ __half2 __hsub2(const __half2 a, const __half2 b)
{
    __half2 result;
    asm("{sub.f16x2 %0,%1,%2;\n}"
        : "=r"(NBITS_BITS32(result)) : "r"(NBITS_CONST_BITS32(a)), "r"(NBITS_CONST_BITS32(b)));
    return result;
}

static __device__ __half2 __hmul2(const __half2 a, const __half2 b)
{
    __half2 result;
    asm("{mul.f16x2 %0,%1,%2;\n}"
        : "=r"(NBITS_BITS32(result)) : "r"(NBITS_CONST_BITS32(a)), "r"(NBITS_CONST_BITS32(b)));
    return result;
}

static __device__ __half2 __hfma2(const __half2 a, const __half2 b, const __half2 c)
{
    __half2 result;
    asm("{fma.rn.f16x2 %0,%1,%2,%3;\n}"
        : "=r"(NBITS_BITS32(result))
        : "r"(NBITS_CONST_BITS32(a)), "r"(NBITS_CONST_BITS32(b)), "r"(NBITS_CONST_BITS32(c)));
    return result;
}

static __device__ __half __hadd(const __half a, const __half b)
{
    __half result;
    asm("{add.f16 %0,%1,%2;\n}"
        : "=h"(NBITS_BITS16(result)) : "h"(NBITS_CONST_BITS16(a)), "h"(NBITS_CONST_BITS16(b)));
    return result;
}

static __device__ __half __hmul(const __half a, const __half b)
{
    __half result;
    asm("{mul.f16 %0,%1,%2;\n}"
        : "=h"(NBITS_BITS16(result)) : "h"(NBITS_CONST_BITS16(a)), "h"(NBITS_CONST_BITS16(b)));
    return result;
}

static __device__ __half __hfma(const __half a, const __half b, const __half c)
{
    __half result;
    asm("{fma.rn.f16 %0,%1,%2,%3;\n}"
        : "=h"(NBITS_BITS16(result))
        : "h"(NBITS_CONST_BITS16(a)), "h"(NBITS_CONST_BITS16(b)), "h"(NBITS_CONST_BITS16(c)));
    return result;
}

#endif  // !defined(__CUDA_FP16_H__)

// ---------------------------------------------------------------- bf16
// Skipped where cuda_bf16.h was included first: its definitions are the same.
#if !defined(__CUDA_BF16_H__)

struct __align__(2) __nv_bfloat16 {
    __nv_bfloat16() = default;

protected:
    unsigned short __x;  // the bf16 bits
};

// Copied as one 32-bit word, like __half2.
struct __align__(4) __nv_bfloat162 {
    __nv_bfloat16 x;
    __nv_bfloat16 y;

    __nv_bfloat162() = default;
    __device__ __nv_bfloat162(const __nv_bfloat162& other)
    {
        NBITS_BITS32(*this) = NBITS_CONST_BITS32(other);
    }
    __device__ __nv_bfloat162& operator=(const __nv_bfloat162& other)
    {
        NBITS_BITS32(*this) = NBITS_CONST_BITS32(other);
        return *this;
    }
};

// Below sm_80 the toolkit emulates bf16 in fp32; nbits does not run there,
// so a kernel using bf16 fails to compile for such a target.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800

static __device__ __nv_bfloat16 __float2bfloat16_rn(const float a)
{
    __nv_bfloat16 result;
    asm("{  cvt.rn.bf16.f32 %0, %1;}\n" : "=h"(NBITS_BITS16(result)) : "f"(a));
    return result;
}

static __device__ __nv_bfloat16 __float2bfloat16(const float a)
{
    return __float2bfloat16_rn(a);
}

// bf16 is the high half of an fp32: below sm_90, which has no cvt.f32.bf16,
// widening places the bits above 16 zero bits.
static __device__ float nbits_bfloat16_bits_to_float(const unsigned short bits)
{
    float result;
#if __CUDA_ARCH__ >= 900
    asm("{ cvt.f32.bf16 %0, %1;}\n" : "=f"(result) : "h"(bits));
#else
    asm("{ mov.b32 %0, {0,%1};}\n" : "=f"(result) : "h"(bits));
#endif
    return result;
}

static __device__ float __bfloat162float(const __nv_bfloat16 a)
{
    return nbits_bfloat16_bits_to_float(NBITS_CONST_BITS16(a));
}

static __device__ float __low2float(const __nv_bfloat162 a)
{
    return nbits_bfloat16_bits_to_float(NBITS_CONST_BITS16(a.x));
}

static __device__ float __high2float(const __nv_bfloat162 a)
{
    return nbits_bfloat16_bits_to_float(NBITS_CONST_BITS16(a.y));
}

static __device__ float2 __bfloat1622float2(const __nv_bfloat162 a)
{
    const float low = __low2float(a);
    const float high = __high2float(a);
    return make_float2(low, high);
}

// {bf16(a), bf16(b)}: the paired cvt names the high half's source first.
static __device__ __nv_bfloat162 __floats2bfloat162_rn(const float a, const float b)
{
    __nv_bfloat162 result;
    asm("{ cvt.rn.bf16x2.f32 %0, %2, %1;}\n"
        : "=r"(NBITS_BITS32(result)) : "f"(a), "f"(b));
    return result;
}

static __device__ __nv_bfloat162 __float22bfloat162_rn(const float2 a)
{
    return __floats2bfloat162_rn(a.x, a.y);
}

static __device__ __nv_bfloat16 __low2bfloat16(const __nv_bfloat162 a)
{
    __nv_bfloat16 result;
    asm("{.reg .b16 low,high;\n"
        " mov.b32 {low,high}, %1;\n"
        " mov.b16 %0, low;}" : "=h"(NBITS_BITS16(result)) : "r"(NBITS_CONST_BITS32(a)));
    return result;
}

static __device__ __nv_bfloat16 __high2bfloat16(const __nv_bfloat162 a)
{
    __nv_bfloat16 result;
    asm("{.reg .b16 low,high;\n"
        " mov.b32 {low,high}, %1;\n"
        " mov.b16 %0, high;}" : "=h"(NBITS_BITS16(result)) : "r"(NBITS_CONST_BITS32(a)));
    return result;
}

static __device__ __nv_bfloat162 __halves2bfloat162(
    const __nv_bfloat16 low, const __nv_bfloat16 high)
{
    __nv_bfloat162 result;
    asm("{  mov.b32 %0, {%1,%2};}\n"
        : "=r"(NBITS_BITS32(result))
        : "h"(NBITS_CONST_BITS16(low)), "h"(NBITS_CONST_BITS16(high)));
    return result;
}

static __device__ __nv_bfloat162 __bfloat162bfloat162(const __nv_bfloat16 a)
{
    __nv_bfloat162 result;
    asm("{  mov.b32 %0, {%1,%1};}\n"
        : "=r"(NBITS_BITS32(result)) : "h"(NBITS_CONST_BITS16(a)));
    return result;
}

// sm_80 has bf16 fma but no bf16 add, sub or mul: the toolkit forms them as
// a + b = fma(a, 1.0, b), a - b = fma(b, -1.0, a) and a * b = fma(a, b, -0.0)
// (-0.0 leaves every product unchanged, a -0 product included), each rounded
// once like the native add.bf16x2, sub.bf16x2 and mul.bf16x2 of sm_90.
static __device__ __nv_bfloat162 __hadd2(const __nv_bfloat162 a, const __nv_bfloat162 b)
{
    __nv_bfloat162 result;
#if __CUDA_ARCH__ >= 900
    asm("{ add.bf16x2 %0,%1,%2; }\n"
        : "=r"(NBITS_BITS32(result)) : "r"(NBITS_CONST_BITS32(a)), "r"(NBITS_CONST_BITS32(b)));
#else
    asm("{.reg .b32 c;\n"
        "  mov.b32 c, 0x3f803f80U;\n"
        "  fma.rn.bf16x2 %0,%1,c,%2;}\n"
        : "=r"(NBITS_BITS32(result)) : "r"(NBITS_CONST_BITS32(a)), "r"(NBITS_CONST_BITS32(b)));
#endif
    return result;
}

static __device__ __nv_bfloat162 __hsub2(const __nv_bfloat162 a, const __nv_bfloat162 b)
{
    __nv_bfloat162 result;
#if __CUDA_ARCH__ >= 900
    asm("{ sub.bf16x2 %0,%1,%2; }\n"
        : "=r"(NBITS_BITS32(result)) : "r"(NBITS_CONST_BITS32(a)), "r"(NBITS_CONST_BITS32(b)));
#else
    asm("{.reg .b32 c;\n"
        "  mov.b32 c, 0xbf80bf80U;\n"
        "  fma.rn.bf16x2 %0,%2,c,%1;}\n"
        : "=r"(NBITS_BITS32(result)) : "r"(NBITS_CONST_BITS32(a)), "r"(NBITS_CONST_BITS32(b)));
#endif
    return result;
}

static __device__ __nv_bfloat162 __hmul2(const __nv_bfloat162 a, const __nv_bfloat162 b)
{
    __nv_bfloat162 result;
#if __CUDA_ARCH__ >= 900
    asm("{ mul.bf16x2 %0,%1,%2; }\n"
        : "=r"(NBITS_BITS32(result)) : "r"(NBITS_CONST_BITS32(a)), "r"(NBITS_CONST_BITS32(b)));
#else
    asm("{.reg .b32 c;\n"
        "  mov.b32 c, 0x80008000U;\n"
        "  fma.rn.bf16x2 %0,%1,%2,c;}\n"
        : "=r"(NBITS_BITS32(result)) : "r"(NBITS_CONST_BITS32(a)), "r"(NBITS_CONST_BITS32(b)));
#endif
    return result;
}

static __device__ __nv_bfloat162 __hfma2(
    const __nv_bfloat162 a, const __nv_bfloat162 b, const __nv_bfloat162 c)
{
    __nv_bfloat162 result;
    asm("{fma.rn.bf16x2 %0,%1,%2,%3;\n}"
        : "=r"(NBITS_BITS32(result))
        : "r"(NBITS_CONST_BITS32(a)), "r"(NBITS_CONST_BITS32(b)), "r"(NBITS_CONST_BITS32(c)));
    return result;
}

static __device__ __nv_bfloat16 __hadd(const __nv_bfloat16 a, const __nv_bfloat16 b)
{
    __nv_bfloat16 result;
#if __CUDA_ARCH__ >= 900
    asm("{ add.bf16 %0,%1,%2; }\n"
        : "=h"(NBITS_BITS16(result)) : "h"(NBITS_CONST_BITS16(a)), "h"(NBITS_CONST_BITS16(b)));
#else
    asm("{.reg .b16 c;\n"
        "  mov.b16 c, 0x3f80U;\n"
        "  fma.rn.bf16 %0,%1,c,%2;}\n"
        : "=h"(NBITS_BITS16(result)) : "h"(NBITS_CONST_BITS16(a)), "h"(NBITS_CONST_BITS16(b)));
#endif
    return result;
}

static __device__ __nv_bfloat16 __hmul(const __nv_bfloat16 a, const __nv_bfloat16 b)
{
    __nv_bfloat16 result;
#if __CUDA_ARCH__ >= 900
    asm("{ mul.bf16 %0,%1,%2; }\n"
        : "=h"(NBITS_BITS16(result)) : "h"(NBITS_CONST_BITS16(a)), "h"(NBITS_CONST_BITS16(b)));
#else
    asm("{.reg .b16 c;\n"
        "  mov.b16 c, 0x8000U;\n"
        "  fma.rn.bf16 %0,%1,%2,c;}\n"
        : "=h"(NBITS_BITS16(result)) : "h"(NBITS_CONST_BITS16(a)), "h"(NBITS_CONST_BITS16(b)));
#endif
    return result;
}

static __device__ __nv_bfloat16 __hfma(
    const __nv_bfloat16 a, const __nv_bfloat16 b, const __nv_bfloat16 c)
{
    __nv_bfloat16 result;
    asm("{fma.rn.bf16 %0,%1,%2,%3;\n}"
        : "=h"(NBITS_BITS16(result))
        : "h"(NBITS_CONST_BITS16(a)), "h"(NBITS_CONST_BITS16(b)), "h"(NBITS_CONST_BITS16(c)));
    return result;
}

#endif  // !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#endif  // !defined(__CUDA_BF16_H__)

#undef NBITS_BITS16
#undef NBITS_CONST_BITS16
#undef NBITS_BITS32
#undef NBITS_CONST_BITS32
