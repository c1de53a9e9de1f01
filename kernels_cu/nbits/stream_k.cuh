// The stream-K partition of the prefill GEMM (NBITS_STREAM_K in
// matmul_prefill.cu): which units of work (an output tile's k tile each) a
// CTA of the grid takes, in what order, and whose partial tiles a CTA sums.
// Host and device code alike, so that a CPU test checks the kernel's own
// partition over many grids. Units count in 32 bits (the plan takes the grid
// only where they do): 64-bit ones cost the 128-token kernel, under the
// register cap of two CTAs an SM, spills.
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
NBITS_STREAM_K_FN int first_unit(const int cta, const int ctas, const int units)
{
    return (int)((long long)units * cta / ctas);
}

// visit(tile, k0, k1) for each output tile that units [begin, end) touch,
// the last tile first: its k tiles k0 .. k1 - 1 of `k_tiles`.
template <class Visit>
NBITS_STREAM_K_FN void for_each_segment(const int begin, const int end, const int k_tiles, Visit visit)
{
    NBITS_STREAM_K_NO_UNROLL
    for (int u = end; u > begin;) {
        const int tile = (u - 1) / k_tiles;
        const int tile_start = tile * k_tiles;
        const int first = begin > tile_start ? begin : tile_start;
        visit(tile, first - tile_start, u - tile_start);
        u = first;
    }
}

// The same walk one k tile at a time, for a pipeline that runs ahead of its
// compute: item j (0 <= j < end - begin) is k tile `k` of segment (tile, k0,
// k1), the segments in for_each_segment's order and each one's k tiles in
// order. Worked out from j alone, so that a pipeline keeps no walk state.
struct WalkItem {
    int tile;
    int k0;
    int k1;
    int k;
};

NBITS_STREAM_K_FN WalkItem walk_item(const int begin, const int end, const int k_tiles, const int j)
{
    // The last tile's segment first, then the tiles before it, each whole but the first, which starts at begin.
    const int last_tile = (end - 1) / k_tiles;
    const int last_start = last_tile * k_tiles > begin ? last_tile * k_tiles : begin;
    int unit;
    if (j < end - last_start) {
        unit = last_start + j;
    } else {
        const int rest = j - (end - last_start);
        const int tile = last_tile - 1 - rest / k_tiles;
        const int tile_start = tile * k_tiles;
        unit = tile_start + rest % k_tiles + (tile_start < begin ? begin - tile_start : 0);
    }
    WalkItem item;
    item.tile = unit / k_tiles;
    const int tile_start = item.tile * k_tiles;
    item.k = unit - tile_start;
    item.k0 = (begin > tile_start ? begin : tile_start) - tile_start;
    item.k1 = end - tile_start < k_tiles ? end - tile_start : k_tiles;
    return item;
}

// A segment ending before its tile's last k tile is a partial for a later
// CTA to sum (a CTA's last segment in unit order, so the first it computes).
NBITS_STREAM_K_FN bool is_partial(const int k1, const int k_tiles) { return k1 < k_tiles; }

// For the segment that holds its tile's last k tile, starting at `tile_start`
// (the tile's first unit): the first of the CTAs before `cta` whose partials
// it sums, lowest .. cta - 1; `cta` itself when it took the whole tile.
NBITS_STREAM_K_FN int lowest_contributor(const int cta, const int ctas, const int units,
                                         const int tile_start)
{
    int lowest = cta;
    while (first_unit(lowest, ctas, units) > tile_start) {
        --lowest;
    }
    return lowest;
}

}  // namespace nbits_stream_k
