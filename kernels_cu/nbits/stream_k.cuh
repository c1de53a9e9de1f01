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

// The walk of units [begin, end) one k tile at a time, for a pipeline that
// runs ahead of its compute: the segments of one output tile each, the last
// tile's first, then the tiles before it, each one's k tiles in order; item j
// (0 <= j < end - begin) is k tile `k` of segment (tile, k0, k1). Worked out
// from j alone, so that a pipeline keeps no walk state.
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

// Tiles shared out unit by unit: all of them, or with `rounds` from two
// rounds of the grid on only the last round and the part-filled one after it
// (from `ctas` to 2 * ctas - 1 tiles), the rounds before taken whole, a tile
// a CTA. A grid sharing every tile has all of them in progress at once, so
// its working set is every weight and activation (on the H100 Llama-3-8B up
// at M = 2048 read 2.3 times the DRAM bytes of whole tiles); whole rounds
// keep to the weights of the round's column tiles.
NBITS_STREAM_K_FN int shared_tiles(const int tiles, const int ctas, const bool rounds)
{
    return rounds && tiles >= 2 * ctas ? tiles - (tiles / ctas - 1) * ctas : tiles;
}

// What CTA `cta` of `ctas` computes over `tiles` output tiles of `k_tiles`
// k tiles: units [begin, end) of the shared tiles' `units` (tiles 0 ..
// shared_tiles - 1; CTA c the units [c U / G, (c + 1) U / G)), then the
// whole tiles units / k_tiles + cta, + ctas, ... up to the last tile. The
// walks below take the CTA, the grid and `rounds` as arguments and the tile
// count as `in_grid(tile)`: a kernel has them at hand (its k tiles and
// `rounds` as constants, the tile count from its M and N), and every register
// a walk keeps besides its units costs the kernels under the register cap
// spills.
struct Work {
    int units;
    int begin;
    int end;
};

NBITS_STREAM_K_FN Work cta_work(const int cta, const int ctas, const int tiles, const int k_tiles, const bool rounds)
{
    Work work;
    work.units = shared_tiles(tiles, ctas, rounds) * k_tiles;
    work.begin = first_unit(cta, ctas, work.units);
    work.end = first_unit(cta + 1, ctas, work.units);
    return work;
}

// visit(tile, k0, k1) for each segment of `work`: the shared units' segments
// in walk_item's order (a partial first, a summed tile last), then with
// `rounds` the whole tiles in order (a loop of their own: one loop for both
// kept a register more across the visit, which the kernels spilled).
template <class InGrid, class Visit>
NBITS_STREAM_K_FN void for_each_work_segment(const Work& work, const int cta, const int ctas, const int k_tiles,
                                             const bool rounds, InGrid in_grid, Visit visit)
{
    const int begin = work.begin;
    NBITS_STREAM_K_NO_UNROLL
    for (int u = work.end; u > begin;) {
        const int tile = (u - 1) / k_tiles;
        const int tile_start = tile * k_tiles;
        const int first = begin > tile_start ? begin : tile_start;
        visit(tile, first - tile_start, u - tile_start);
        u = first;
    }
    if (rounds) {
        NBITS_STREAM_K_NO_UNROLL
        for (int tile = work.units / k_tiles + cta; in_grid(tile); tile += ctas) {
            visit(tile, 0, k_tiles);
        }
    }
}

// The whole tile of item j past the shared units (j >= end - begin): the
// walk has item j while that tile is in the grid.
NBITS_STREAM_K_FN int whole_tile(const Work& work, const int cta, const int ctas, const int k_tiles, const int j)
{
    return work.units / k_tiles + cta + (j - (work.end - work.begin)) / k_tiles * ctas;
}

// Item j of for_each_work_segment's walk, one k tile at a time: j below
// end - begin, or with `rounds` past it while whole_tile(j) is in the grid.
NBITS_STREAM_K_FN WalkItem work_item(const Work& work, const int cta, const int ctas, const int k_tiles, const int j)
{
    const int shared = work.end - work.begin;
    if (j < shared) {
        return walk_item(work.begin, work.end, k_tiles, j);
    }
    WalkItem item;
    item.tile = whole_tile(work, cta, ctas, k_tiles, j);
    item.k = (j - shared) % k_tiles;
    item.k0 = 0;
    item.k1 = k_tiles;
    return item;
}

}  // namespace nbits_stream_k
