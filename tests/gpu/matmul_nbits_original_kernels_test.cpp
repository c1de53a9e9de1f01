// The port did not move the numerics: every configuration of the case table
// runs twice on the same inputs, once with nbits' kernels and once with the
// original kernel of each step (same entry name, plan, geometry and
// arguments), and the outputs must be the same bytes.

#include "matmul_fixture.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <iterator>

using namespace nbits;
using namespace nbits::test;

namespace {

std::string joined(const std::vector<std::string>& names)
{
    std::string text;
    for (const std::string& name : names) {
        text += (text.empty() ? "" : ", ") + name;
    }
    return text.empty() ? "(none)" : text;
}

std::vector<std::string> missing_from(const std::set<std::string>& wanted, const std::set<std::string>& present)
{
    std::vector<std::string> missing;
    std::set_difference(wanted.begin(), wanted.end(), present.begin(), present.end(), std::back_inserter(missing));
    return missing;
}

}  // namespace

TEST_CASE("every kernel entry writes the original kernel's bytes for the same plan and inputs")
{
    std::set<std::string> launched;
    for_each_operator_case(0x5eed000000000000ull, [&](const OperatorCase& spec, PreparedCase& prepared) {
        const RunOutcome own = prepared.run();
        const std::vector<std::string> entries = kernel_entries(own.plan);
        CHECK_MESSAGE(entries == spec.entries,
                      "the plan launched " << joined(entries) << "; expected " << joined(spec.entries));
        CHECK(has_gemm_step(own.plan) == spec.gemm);
        CHECK(own.plan.capture_safe == spec.capture_safe());
        launched.insert(entries.begin(), entries.end());

        std::set<std::string> overridden;
        const RunOutcome original = prepared.run(reference::original_kernels(overridden));
        CHECK(kernel_entries(original.plan) == entries);
        const std::set<std::string> stepped(entries.begin(), entries.end());
        CHECK_MESSAGE(overridden == stepped, "only " << joined(std::vector<std::string>(overridden.begin(), overridden.end()))
                                                     << " ran the original kernel, of " << joined(entries));
        const std::string difference = byte_difference(own.bytes, original.bytes, element_size(spec.activation));
        CHECK_MESSAGE(difference.empty(), difference);
    });
    const std::vector<std::string> never = missing_from(all_kernel_entries(), launched);
    CHECK_MESSAGE(never.empty(), "no case launched " << joined(never));
    const std::vector<std::string> unknown = missing_from(launched, all_kernel_entries());
    CHECK_MESSAGE(unknown.empty(), "the plans launched entries the original does not have: " << joined(unknown));
}
