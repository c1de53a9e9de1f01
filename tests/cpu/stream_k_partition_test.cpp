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
    long long tile;
    int k0;
    int k1;
};

// The segments CTA `cta` computes, in the order it computes them.
std::vector<Segment> segments_of(int cta, int ctas, long long units, int k_tiles)
{
    std::vector<Segment> found;
    nbits_stream_k::for_each_segment(nbits_stream_k::first_unit(cta, ctas, units),
                                     nbits_stream_k::first_unit(cta + 1, ctas, units), k_tiles,
                                     [&](long long tile, int k0, int k1) { found.push_back({tile, k0, k1}); });
    return found;
}

void check_partition(long long tiles, int k_tiles, int ctas)
{
    CAPTURE(tiles);
    CAPTURE(k_tiles);
    CAPTURE(ctas);
    const long long units = tiles * k_tiles;
    std::map<std::pair<long long, int>, int> computed_by;  // (tile, k tile) -> CTA
    std::map<int, Segment> partial_of;                     // CTA -> the segment it leaves as a partial
    std::set<int> summed;                                  // CTAs whose partial some CTA sums
    std::vector<std::tuple<int, Segment, int>> sums;       // (CTA, its segment, lowest contributor)
    std::size_t twice = 0;                                  // units computed by a second segment
    for (int cta = 0; cta < ctas; ++cta) {
        const std::vector<Segment> segments = segments_of(cta, ctas, units, k_tiles);
        REQUIRE(!segments.empty());  // the plan never launches more CTAs than units
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
    for (const long long tiles : {1LL, 2LL, 3LL, 7LL, 32LL, 36LL, 48LL, 112LL, 148LL, 224LL, 296LL, 448LL, 1188LL}) {
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
    const long long units = 148LL * 56;  // Qwen2.5-7B up at M = 256 on the H200's 132 SMs
    long long fewest = units;
    long long most = 0;
    for (int cta = 0; cta < 132; ++cta) {
        const long long count =
            nbits_stream_k::first_unit(cta + 1, 132, units) - nbits_stream_k::first_unit(cta, 132, units);
        fewest = std::min(fewest, count);
        most = std::max(most, count);
    }
    CHECK(fewest == 62);
    CHECK(most == 63);
}
