// GPU test main: without a usable GPU it prints one line saying why and exits
// 77, which CTest reports as skipped (never as passed).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "gpu_fixture.hpp"
#include "nbits/error.hpp"

#include <cstdio>
#include <cstdlib>
#include <memory>

namespace nbits::test {
namespace {
std::shared_ptr<CudaRuntime> shared;
}

RuntimeOptions shared_runtime_options()
{
    RuntimeOptions options;
    return options;
}

CudaRuntime& gpu() { return *shared; }
const std::shared_ptr<CudaRuntime>& gpu_shared() { return shared; }

}  // namespace nbits::test

int main(int argc, char** argv)
{
    doctest::Context context(argc, argv);
    try {
        nbits::test::shared = std::make_shared<nbits::CudaRuntime>(nbits::test::shared_runtime_options());
    } catch (const nbits::Error& error) {
        if (error.kind() == nbits::ErrorKind::NoDriver || error.kind() == nbits::ErrorKind::NoDevice) {
            std::printf("SKIPPED nbits_gpu_tests: no GPU: %s\n", error.what());
            return 77;
        }
        std::printf("nbits_gpu_tests: the GPU runtime could not start: %s\n", error.what());
        return 1;
    }
    const auto& caps = nbits::test::gpu().capabilities();
    std::printf("nbits_gpu_tests on %s (sm_%d%d, %u SMs)\n", caps.name.c_str(), caps.compute_major,
                caps.compute_minor, caps.multiprocessor_count);
    const int result = context.run();
    nbits::test::shared.reset();
    return result;
}
