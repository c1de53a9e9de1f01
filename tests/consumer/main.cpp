// A program an inference engine would write, and the README's example: link
// nbits, ask for a runtime, run one MatMulNBits decode on the engine's own
// stream. It must link and start without a GPU driver, where it reports why
// there is no runtime.
#include <nbits/nbits.hpp>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

int main()
{
    std::printf("nbits %s\n", nbits::version());
    std::shared_ptr<nbits::CudaRuntime> runtime;
    try {
        runtime = std::make_shared<nbits::CudaRuntime>();  // device 0: context, stream, JIT, scratch pool
    } catch (const nbits::Error& error) {
        std::printf("no runtime (%s): %s\n", nbits::to_string(error.kind()), error.what());
        return error.kind() == nbits::ErrorKind::NoDriver || error.kind() == nbits::ErrorKind::NoDevice ? 0 : 1;
    }

    nbits::NodeAttributes attributes;  // the ONNX node's attributes
    attributes.set("K", std::int64_t{4096}).set("N", std::int64_t{6144});
    attributes.set("bits", std::int64_t{4}).set("block_size", std::int64_t{32});
    nbits::ops::MatMulNBits matmul(runtime, attributes, {nbits::KernelPolicy::Fastest});  // checks attributes once

    nbits::DeviceBuffer a(*runtime, 4096 * 2), b(*runtime, 6144 * 128 * 16), scales(*runtime, 6144 * 128 * 2),
        y(*runtime, 6144 * 2);
    runtime->memset_async(a.get(), 0x11, a.size());
    runtime->memset_async(b.get(), 0x37, b.size());
    runtime->memset_async(scales.get(), 0x22, scales.size());
    runtime->synchronize();

    using nbits::DataType;
    using nbits::Tensor;  // device tensors, in the ONNX input order
    const std::vector<Tensor> inputs = {
        Tensor::dense(a.get(), DataType::Float16, {1, 4096}),          // A
        Tensor::dense(b.get(), DataType::Uint8, {6144, 128, 16}),      // B [N, k_blocks, blob]
        Tensor::dense(scales.get(), DataType::Float16, {6144, 128}),   // scales
    };                                                                 // Tensor::absent(...) for skipped optionals
    const std::vector<Tensor> outputs = {Tensor::dense(y.get(), DataType::Float16, {1, 6144})};

    nbits::RunOptions options;
    options.stream = runtime->stream();  // the engine's CUstream of the same context; nullptr: nbits' own
    const auto plan = matmul.run(inputs, outputs, options);  // plans once per shape, then only launches
    runtime->synchronize();
    std::printf("ran %s under policy %s (capture-safe: %s)\n", plan->variant.c_str(), nbits::to_string(plan->policy),
                plan->capture_safe ? "yes" : "no");
    return 0;
}
