// The stream-K prefill GEMM's partition of its units (kernels_cu/nbits/stream_k.cuh, the kernel's own code): over
// many grids, every unit is computed once, each CTA leaves at most one partial tile and computes it first, every
// tile shared by CTAs is summed once from exactly the partials that cover it, a CTA only ever waits for CTAs
// launched before it (so the grid makes progress however few of its CTAs run at once), and from two rounds of
// tiles on only the last round and the part-filled one are shared, the rounds before them taken whole.

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
std::vector<Segment> segments_of(const nbits_stream_k::Work& work, int cta, int ctas, int tiles, int k_tiles,
                                 bool rounds)
{
    std::vector<Segment> found;
    nbits_stream_k::for_each_work_segment(work, cta, ctas, k_tiles, rounds, [&](int tile) { return tile < tiles; },
                                          [&](int tile, int k0, int k1) { found.push_back({tile, k0, k1}); });
    return found;
}

// The k tiles CTA `cta` computes: its shared units and a round's whole tiles.
int items_of(int cta, int ctas, int tiles, int k_tiles)
{
    const nbits_stream_k::Work work = nbits_stream_k::cta_work(cta, ctas, tiles, k_tiles, true);
    return work.end - work.begin + (tiles - work.units / k_tiles) / ctas * k_tiles;
}

// work_item, one k tile at a time while the kernel's pipeline finds an item (the shared units, then whole tiles
// inside the grid), gives exactly for_each_work_segment's segments and k tiles, in order.
void check_walk(const nbits_stream_k::Work& work, int cta, int ctas, int tiles, int k_tiles, bool rounds,
                const std::vector<Segment>& segments)
{
    const auto has_item = [&](int j) {
        return j < work.end - work.begin || (rounds && nbits_stream_k::whole_tile(work, cta, ctas, k_tiles, j) < tiles);
    };
    int j = 0;
    for (const Segment& s : segments) {
        for (int k = s.k0; k < s.k1; ++k, ++j) {
            REQUIRE(has_item(j));
            const nbits_stream_k::WalkItem item = nbits_stream_k::work_item(work, cta, ctas, k_tiles, j);
            CHECK(item.tile == s.tile);
            CHECK(item.k0 == s.k0);
            CHECK(item.k1 == s.k1);
            CHECK(item.k == k);
        }
    }
    CHECK_FALSE(has_item(j));
}

void check_partition(int tiles, int k_tiles, int ctas, bool rounds)
{
    CAPTURE(tiles);
    CAPTURE(k_tiles);
    CAPTURE(ctas);
    CAPTURE(rounds);
    const int units = tiles * k_tiles;
    const int shared = nbits_stream_k::shared_tiles(tiles, ctas, rounds);
    // Without rounds, or below two, every tile is shared; from two rounds on, the last full round and the part-filled
    // one.
    CHECK(shared == (!rounds || tiles < 2 * ctas ? tiles : tiles % ctas + ctas));
    std::map<std::pair<int, int>, int> computed_by;  // (tile, k tile) -> CTA
    std::map<int, Segment> partial_of;                     // CTA -> the segment it leaves as a partial
    std::set<int> summed;                                  // CTAs whose partial some CTA sums
    std::vector<std::tuple<int, Segment, int>> sums;       // (CTA, its segment, lowest contributor)
    std::size_t twice = 0;                                  // units computed by a second segment
    for (int cta = 0; cta < ctas; ++cta) {
        const nbits_stream_k::Work work = nbits_stream_k::cta_work(cta, ctas, tiles, k_tiles, rounds);
        CHECK(work.units == shared * k_tiles);
        const std::vector<Segment> segments = segments_of(work, cta, ctas, tiles, k_tiles, rounds);
        REQUIRE(!segments.empty());  // the plan never launches more CTAs than units
        check_walk(work, cta, ctas, tiles, k_tiles, rounds, segments);
        // Past its shared units, a CTA takes whole tiles a round apart: round r is tiles shared + r G .. + G - 1.
        const auto whole_count = static_cast<std::size_t>((tiles - shared) / ctas);
        REQUIRE(segments.size() >= whole_count);
        const std::size_t whole_from = segments.size() - whole_count;
        for (std::size_t i = whole_from; i < segments.size(); ++i) {
            CHECK(segments[i].tile == shared + cta + static_cast<int>(i - whole_from) * ctas);
            CHECK(segments[i].k0 == 0);
            CHECK(segments[i].k1 == k_tiles);
        }
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
                const int lowest = nbits_stream_k::lowest_contributor(cta, ctas, work.units, s.tile * k_tiles);
                CHECK(lowest <= cta);
                CHECK((lowest == cta) == (s.k0 == 0));
                if (lowest < cta) {
                    CHECK(i + 1 == whole_from);  // the last of its shared units computed
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
                    check_partition(tiles, k_tiles, ctas, false);
                    check_partition(tiles, k_tiles, ctas, true);
                }
            }
        }
    }
}

TEST_CASE("the stream-K partition spreads the units evenly: no CTA takes more than one unit beyond another")
{
    // Qwen2.5-7B up at M = 256 on the H200's 132 SMs (148 tiles of 56 k tiles, all shared), Llama-3-8B up at
    // M = 2048 (896 tiles of 64: five whole rounds, then 236 tiles shared).
    for (const auto& [tiles, k_tiles, fewest_expected] : {std::tuple{148, 56, 62}, std::tuple{896, 64, 434}}) {
        CAPTURE(tiles);
        int fewest = tiles * k_tiles;
        int most = 0;
        for (int cta = 0; cta < 132; ++cta) {
            const int count = items_of(cta, 132, tiles, k_tiles);
            fewest = std::min(fewest, count);
            most = std::max(most, count);
        }
        CHECK(fewest == fewest_expected);
        CHECK(most == fewest_expected + 1);
    }
}

TEST_CASE("the stream-K partition counts in 32 bits up to the plan's bound of 2^31 - 1 units without overflowing")
{
    // The kernel's units are 32-bit (the plan takes the grid only below 2^31); a CTA's first unit multiplies
    // before it divides, in 64 bits. 527 tiles on 264 CTAs are all shared, 2^31 / 64 tiles all but 264..527.
    for (const int k_tiles : {2147483647 / 527, 64}) {
        CAPTURE(k_tiles);
        const int tiles = 2147483647 / k_tiles;
        const int shared = nbits_stream_k::shared_tiles(tiles, 264, true);
        int previous = 0;
        for (int cta = 0; cta <= 264; ++cta) {
            const int first = nbits_stream_k::first_unit(cta, 264, shared * k_tiles);
            CHECK(first >= previous);
            previous = first;
        }
        CHECK(previous == shared * k_tiles);
        // The last CTA's walk: its last shared tile first; its last item, the last k tile of the last tile.
        const nbits_stream_k::Work work = nbits_stream_k::cta_work(263, 264, tiles, k_tiles, true);
        const nbits_stream_k::WalkItem first = nbits_stream_k::work_item(work, 263, 264, k_tiles, 0);
        CHECK(first.tile == shared - 1);
        CHECK(first.k1 == k_tiles);
        CHECK(first.k == first.k0);
        const nbits_stream_k::WalkItem last =
            nbits_stream_k::work_item(work, 263, 264, k_tiles, items_of(263, 264, tiles, k_tiles) - 1);
        CHECK(last.tile == (shared == tiles ? work.begin / k_tiles : tiles - 1));
        CHECK(last.k == k_tiles - 1);
    }
}
