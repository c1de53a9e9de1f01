// The stream-K prefill GEMM's partition of its units (kernels_cu/nbits/stream_k.cuh, the kernel's own code): over
// many grids, every unit is computed once, each CTA leaves at most one partial tile and computes it first, every
// tile shared by CTAs is summed once from exactly the partials that cover it, and a CTA only ever waits for CTAs
// launched before it (so the grid makes progress however few of its CTAs run at once).

#include "nbits/stream_k.cuh"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

namespace {

struct Segment {
    int tile;
    int k0;
    int k1;
};

// The segments CTA `cta` computes, in the order it computes them.
std::vector<Segment> segments_of(int cta, int ctas, int units, int k_tiles)
{
    std::vector<Segment> found;
    nbits_stream_k::for_each_segment(nbits_stream_k::first_unit(cta, ctas, units),
                                     nbits_stream_k::first_unit(cta + 1, ctas, units), k_tiles,
                                     [&](int tile, int k0, int k1) { found.push_back({tile, k0, k1}); });
    return found;
}

// walk_item, one k tile at a time, gives exactly for_each_segment's segments and k tiles, in order.
void check_walk(int cta, int ctas, int units, int k_tiles, const std::vector<Segment>& segments)
{
    const int begin = nbits_stream_k::first_unit(cta, ctas, units);
    const int end = nbits_stream_k::first_unit(cta + 1, ctas, units);
    int j = 0;
    for (const Segment& s : segments) {
        for (int k = s.k0; k < s.k1; ++k, ++j) {
            const nbits_stream_k::WalkItem item = nbits_stream_k::walk_item(begin, end, k_tiles, j);
            CHECK(item.tile == s.tile);
            CHECK(item.k0 == s.k0);
            CHECK(item.k1 == s.k1);
            CHECK(item.k == k);
        }
    }
    CHECK(j == end - begin);
}

void check_partition(int tiles, int k_tiles, int ctas)
{
    CAPTURE(tiles);
    CAPTURE(k_tiles);
    CAPTURE(ctas);
    const int units = tiles * k_tiles;
    std::map<std::pair<int, int>, int> computed_by;  // (tile, k tile) -> CTA
    std::map<int, Segment> partial_of;                     // CTA -> the segment it leaves as a partial
    std::set<int> summed;                                  // CTAs whose partial some CTA sums
    std::vector<std::tuple<int, Segment, int>> sums;       // (CTA, its segment, lowest contributor)
    std::size_t twice = 0;                                  // units computed by a second segment
    for (int cta = 0; cta < ctas; ++cta) {
        const std::vector<Segment> segments = segments_of(cta, ctas, units, k_tiles);
        REQUIRE(!segments.empty());  // the plan never launches more CTAs than units
        check_walk(cta, ctas, units, k_tiles, segments);
        for (std::size_t i = 0; i < segments.size(); ++i) {
            const Segment& s = segments[i];
            REQUIRE(s.k0 < s.k1);
            for (int k = s.k0; k < s.k1; ++k) {
                twice += computed_by.emplace(std::make_pair(s.tile, k), cta).second ? 0 : 1;
            }
            if (nbits_stream_k::is_partial(s.k1, k_tiles)) {
                CHECK(i == 0);  // computed first, before anything this CTA waits for
                CHECK(partial_of.emplace(cta, s).second);
            } else {
                const int lowest = nbits_stream_k::lowest_contributor(cta, ctas, units, s.tile * k_tiles);
                CHECK(lowest <= cta);
                CHECK((lowest == cta) == (s.k0 == 0));
                if (lowest < cta) {
                    CHECK(i + 1 == segments.size());  // computed last
                }
                sums.emplace_back(cta, s, lowest);
            }
        }
    }
    CHECK(twice == 0);
    CHECK(computed_by.size() == static_cast<std::size_t>(units));
    for (const auto& [cta, segment, lowest] : sums) {
        // The partials of CTAs lowest .. cta - 1 and this segment cover the tile's k tiles once each.
        int next = 0;
        for (int other = lowest; other < cta; ++other) {
            const auto partial = partial_of.find(other);
            REQUIRE(partial != partial_of.end());
            CHECK(partial->second.tile == segment.tile);
            CHECK(partial->second.k0 == next);
            next = partial->second.k1;
            CHECK(summed.insert(other).second);
        }
        CHECK(next == segment.k0);
    }
    CHECK(summed.size() == partial_of.size());
}

}  // namespace

TEST_CASE("the stream-K partition computes every unit once and sums each shared tile once, waiting only backwards")
{
    for (const int tiles : {1, 2, 3, 7, 32, 36, 48, 112, 148, 224, 296, 448, 1188}) {
        for (const int k_tiles : {1, 2, 3, 8, 16, 56, 64, 448}) {
            for (const int ctas : {1, 2, 3, 7, 131, 132, 264}) {
                if (tiles * k_tiles >= ctas) {
                    check_partition(tiles, k_tiles, ctas);
                }
            }
        }
    }
}

TEST_CASE("the stream-K partition spreads the units evenly: no CTA takes more than one unit beyond another")
{
    const int units = 148 * 56;  // Qwen2.5-7B up at M = 256 on the H200's 132 SMs
    int fewest = units;
    int most = 0;
    for (int cta = 0; cta < 132; ++cta) {
        const int count =
            nbits_stream_k::first_unit(cta + 1, 132, units) - nbits_stream_k::first_unit(cta, 132, units);
        fewest = std::min(fewest, count);
        most = std::max(most, count);
    }
    CHECK(fewest == 62);
    CHECK(most == 63);
}

TEST_CASE("the stream-K partition counts in 32 bits up to the plan's bound of 2^31 - 1 units without overflowing")
{
    // The kernel's units are 32-bit (the plan takes the grid only below 2^31); a CTA's first unit multiplies
    // before it divides, in 64 bits.
    constexpr int kUnits = 2147483647 / 64 * 64;  // whole tiles of 64 k tiles
    int previous = 0;
    for (int cta = 0; cta <= 264; ++cta) {
        const int first = nbits_stream_k::first_unit(cta, 264, kUnits);
        CHECK(first >= previous);
        previous = first;
    }
    CHECK(nbits_stream_k::first_unit(264, 264, kUnits) == kUnits);
    // The last CTA's walk: its last tile first, k tiles of 64.
    const int begin = nbits_stream_k::first_unit(263, 264, kUnits);
    const nbits_stream_k::WalkItem last = nbits_stream_k::walk_item(begin, kUnits, 64, 0);
    CHECK(last.tile == kUnits / 64 - 1);
    CHECK(last.k1 == 64);
    CHECK(last.k == last.k0);
    // Its last item: the last k tile of the tile holding its first unit.
    CHECK(nbits_stream_k::walk_item(begin, kUnits, 64, kUnits - begin - 1).k == 63);
}
