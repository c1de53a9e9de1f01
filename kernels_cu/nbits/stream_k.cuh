// The stream-K partition of the prefill GEMM (NBITS_STREAM_K in
// matmul_prefill.cu): which units of work (an output tile's k tile each) a
// CTA of the grid takes, in what order, and whose partial tiles a CTA sums.
// Host and device code alike, so that a CPU test checks the kernel's own
// partition over many grids.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define NBITS_STREAM_K_FN __host__ __device__ __forceinline__
#define NBITS_STREAM_K_NO_UNROLL _Pragma("unroll 1")
#else
#define NBITS_STREAM_K_FN inline
#define NBITS_STREAM_K_NO_UNROLL
#endif

namespace nbits_stream_k {

// The first unit of CTA `cta` of `ctas` over `units` units: CTA c takes
// units [c U / G, (c + 1) U / G), as even as whole units allow.
NBITS_STREAM_K_FN long long first_unit(const int cta, const int ctas, const long long units)
{
    return units * cta / ctas;
}

// visit(tile, k0, k1) for each output tile that units [begin, end) touch,
// the last tile first: its k tiles k0 .. k1 - 1 of `k_tiles`.
template <class Visit>
NBITS_STREAM_K_FN void for_each_segment(const long long begin, const long long end, const int k_tiles, Visit visit)
{
    NBITS_STREAM_K_NO_UNROLL
    for (long long u = end; u > begin;) {
        const long long tile = (u - 1) / k_tiles;
        const long long tile_start = tile * k_tiles;
        const long long first = begin > tile_start ? begin : tile_start;
        visit(tile, (int)(first - tile_start), (int)(u - tile_start));
        u = first;
    }
}

// A segment ending before its tile's last k tile is a partial for a later
// CTA to sum (a CTA's last segment in unit order, so the first it computes).
NBITS_STREAM_K_FN bool is_partial(const int k1, const int k_tiles) { return k1 < k_tiles; }

// For the segment that holds its tile's last k tile, starting at `tile_start`
// (the tile's first unit): the first of the CTAs before `cta` whose partials
// it sums, lowest .. cta - 1; `cta` itself when it took the whole tile.
NBITS_STREAM_K_FN int lowest_contributor(const int cta, const int ctas, const long long units,
                                         const long long tile_start)
{
    int lowest = cta;
    while (first_unit(lowest, ctas, units) > tile_start) {
        --lowest;
    }
    return lowest;
}

}  // namespace nbits_stream_k
