// Faults an engine must survive: allocations that fail on every path that
// allocates (OutOfMemory, nothing leaked, the context still usable), and a
// kernel fault, isolated in a child process, reported with the launch that
// caused it.

#include "matmul_fixture.hpp"

#include "nbits/error.hpp"
#include "ops/testing.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

extern char** environ;

using namespace nbits;
using namespace nbits::test;

namespace {

constexpr const char* kFaultChildEnv = "NBITS_TEST_FAULT_CHILD";

// Lifts the allocation budget however the scope ends.
class AllocationBudget {
public:
    AllocationBudget(CudaRuntime& runtime, std::uint64_t allocations) : runtime_(runtime)
    {
        ops::detail::OperatorAccess::set_allocation_budget(runtime_, allocations);
    }
    ~AllocationBudget() { ops::detail::OperatorAccess::set_allocation_budget(runtime_, std::nullopt); }
    AllocationBudget(const AllocationBudget&) = delete;
    AllocationBudget& operator=(const AllocationBudget&) = delete;

private:
    CudaRuntime& runtime_;
};

}  // namespace

TEST_CASE("every path that allocates returns OutOfMemory when the device has no room, leaks nothing, and recovers")
{
    CudaRuntime& runtime = matmul_gpu();
    std::size_t allocating = 0;
    for_each_operator_case(0x00d0000000000000ull, [&](const OperatorCase& spec, PreparedCase& prepared) {
        const RunOutcome reference = prepared.run();
        const bool needs_scratch = reference.plan.workspace_bytes() > 0;
        {
            const AllocationBudget none(runtime, 0);
            const std::uint64_t live = runtime.counters().live();
            DeviceOutput& output = prepared.output();
            output.poison();
            if (needs_scratch) {
                ++allocating;
                try {
                    prepared.op().run(prepared.inputs(), {output.tensor()});
                    FAIL_CHECK("the run allocated scratch past an exhausted budget");
                } catch (const Error& error) {
                    CHECK(error.kind() == ErrorKind::OutOfMemory);
                    CHECK(std::string(error.what()).find("out of memory") != std::string::npos);
                }
                CHECK(output.still_poisoned());
            } else {
                // Paths without scratch never allocate per run.
                prepared.op().run(prepared.inputs(), {output.tensor()});
            }
            CHECK(runtime.counters().live() == live);
        }
        // The context is still usable: the same run gives the same bytes.
        const RunOutcome again = prepared.run();
        const std::string difference = byte_difference(again.bytes, reference.bytes, element_size(spec.activation));
        CHECK_MESSAGE(difference.empty(), difference);
    });
    CHECK(allocating > 0);

    // The operator's own workspace (accuracy level 4) is allocated when it is built.
    {
        const AllocationBudget none(runtime, 0);
        const std::uint64_t live = runtime.counters().live();
        CHECK_THROWS_WITH_AS(ops::MatMulNBits(matmul_gpu_shared(), matmul_attributes(256, 64, 4, 32, 4)),
                             doctest::Contains("out of memory"), Error);
        CHECK_THROWS_AS(DeviceBuffer(runtime, 1024), Error);
        CHECK(runtime.counters().live() == live);
    }
    CHECK_NOTHROW(ops::MatMulNBits(matmul_gpu_shared(), matmul_attributes(256, 64, 4, 32, 4)));
}

TEST_CASE("a kernel fault child: runs a GEMV over an unmapped weight address" * doctest::skip(std::getenv(kFaultChildEnv) == nullptr))
{
    // Only in the child process the next test starts: the fault breaks this process's context for good.
    const auto runtime = std::make_shared<CudaRuntime>();
    ops::MatMulNBits op(runtime, matmul_attributes(4096, 4096, 4, 32, 0), {KernelPolicy::Fastest});
    DeviceBuffer a(*runtime, 4096 * 2), scales(*runtime, 4096 * 128 * 2), y(*runtime, 4096 * 2);
    // 256-byte aligned, inside no allocation.
    const CUdeviceptr unmapped = 0x7f0000000000ull;
    const std::vector<Tensor> inputs = {Tensor::dense(a.get(), DataType::Float16, {1, 4096}),
                                        Tensor::dense(unmapped, DataType::Uint8, {4096, 128, 16}),
                                        Tensor::dense(scales.get(), DataType::Float16, {4096, 128})};
    try {
        op.run(inputs, {Tensor::dense(y.get(), DataType::Float16, {1, 4096})});
        runtime->synchronize();
        std::fprintf(stderr, "no fault\n");
    } catch (const Error& error) {
        std::fprintf(stderr, "fault: %s\n", error.what());
    }
    std::fflush(stderr);
    std::_Exit(3);
}

TEST_CASE("a kernel fault isolated in a child process names the launch, and this process goes on")
{
    char self[4096] = {};
    const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
    REQUIRE(length > 0);
    const std::string log = fmt::format("/tmp/nbits-fault-child-{}.log", getpid());
    std::vector<std::string> environment = {std::string(kFaultChildEnv) + "=1", "NBITS_SYNC_LAUNCHES=1"};
    for (char** variable = environ; *variable != nullptr; ++variable) {
        environment.emplace_back(*variable);
    }
    std::vector<char*> envp;
    for (std::string& entry : environment) {
        envp.push_back(entry.data());
    }
    envp.push_back(nullptr);
    std::string filter = "--test-case=a kernel fault child*";
    std::string quiet = "--no-intro=true";
    char* argv[] = {self, filter.data(), quiet.data(), nullptr};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t child = 0;
    REQUIRE(posix_spawn(&child, self, &actions, nullptr, argv, envp.data()) == 0);
    posix_spawn_file_actions_destroy(&actions);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    std::ifstream file(log);
    std::stringstream text;
    text << file.rdbuf();
    std::remove(log.c_str());
    INFO("child stderr: " << text.str());
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 3);
    CHECK(text.str().find("fault: ") != std::string::npos);
    CHECK(text.str().find("nbits decode GEMV") != std::string::npos);
    CHECK(text.str().find("CUDA_ERROR_ILLEGAL_ADDRESS") != std::string::npos);

    // This process's runtime never saw the fault.
    PreparedCase prepared(operator_cases().front(), 5);
    CHECK_NOTHROW(prepared.run());
}
