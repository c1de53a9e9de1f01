// Paths that say they are capture-safe (every one without g_idx: scratch is
// stream-ordered) record into a CUDA graph and replay with the bytes of an
// eager run; the others say why not.

#include "matmul_fixture.hpp"

#include <doctest/doctest.h>

using namespace nbits;
using namespace nbits::test;


TEST_CASE("every capture-safe path replays from a CUDA graph with the bytes of an eager run")
{
    CudaRuntime& runtime = matmul_gpu();
    for_each_operator_case(0xca97000000000000ull, [&](const OperatorCase& spec, PreparedCase& prepared) {
        // The eager run compiles and creates every lazy handle outside the capture.
        const RunOutcome eager = prepared.run();
        CHECK(eager.plan.capture_safe == spec.capture_safe());
        const ops::CaptureSupport support = prepared.op().capture_support();
        CHECK(support.supported == eager.plan.capture_safe);
        if (!support.supported) {
            CHECK(support.reason == ops::kCaptureUnsupportedReason);
            return;
        }

        DeviceOutput& output = prepared.output();
        check_graph_replays(runtime, output, eager.bytes, element_size(spec.activation),
                            [&] { prepared.op().run(prepared.inputs(), {output.tensor()}); });
        CHECK(prepared.op().capture_support().supported);
    });
}
