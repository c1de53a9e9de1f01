// The executor's checks that need no GPU: every device address a plan uses
// must be present and aligned for the loads of its entry.

#include "matmul_nbits_fixtures.hpp"
#include "ops/execute.hpp"

using namespace nbits;
using namespace nbits::ops;
using test::node;
using test::prefixed;

namespace {

// Tensors for a problem's descriptors at 256-byte aligned fake addresses.
std::vector<Tensor> at_addresses(const std::vector<TensorDesc>& descs, CUdeviceptr base)
{
    std::vector<Tensor> tensors;
    for (const TensorDesc& d : descs) {
        Tensor t;
        static_cast<TensorDesc&>(t) = d;
        t.data = d.present ? base : 0;
        base += 0x10000;
        tensors.push_back(t);
    }
    return tensors;
}

std::string address_error(const LaunchPlan& plan, const std::vector<Tensor>& inputs,
                          const std::vector<Tensor>& outputs, CUdeviceptr workspace = 0x9000000)
{
    try {
        detail::check_addresses(plan, {inputs, outputs, workspace});
    } catch (const Error& error) {
        return error.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("well-aligned tensors pass the executor's address checks")
{
    const test::Problem p = test::problem(node(4864, 896));
    CHECK(address_error(p.plan(), at_addresses(p.inputs, 0x100000), at_addresses(p.outputs, 0x800000)) == "(no error)");
}

TEST_CASE("a misaligned activation is refused before launch, naming the tensor and the alignment")
{
    const test::Problem p = test::problem(node(4864, 896));
    std::vector<Tensor> inputs = at_addresses(p.inputs, 0x100000);
    inputs[0].data += 8;
    CHECK(address_error(p.plan(), inputs, at_addresses(p.outputs, 0x800000)) ==
          prefixed("A (input 0) is at device address 0x100008, which is not 16-byte aligned. Why: "
                   "matmul_nbits_gemv_f16_scales_f16_down_c2 reads it in 16-byte loads, and a misaligned load faults "
                   "the CUDA context. How to fix: pass A (input 0) at an address that is a multiple of 16 "
                   "(cuMemAlloc returns 256-byte aligned memory; a view at an offset into a larger buffer may not "
                   "be)"));
    // The same offset is fine for the general-block-size GEMV, which reads fp16 elements.
    const test::Problem general = test::problem(node(896, 896, 8, 64));
    std::vector<Tensor> general_inputs = at_addresses(general.inputs, 0x100000);
    general_inputs[0].data += 2;
    CHECK(address_error(general.plan(), general_inputs, at_addresses(general.outputs, 0x800000)) == "(no error)");
    general_inputs[0].data += 1;
    CHECK(address_error(general.plan(), general_inputs, at_addresses(general.outputs, 0x800000)).find(
              "A (input 0) is at device address 0x100003, which is not 2-byte aligned") != std::string::npos);
}

TEST_CASE("misaligned weights, paired weights and outputs are refused too")
{
    const test::Problem p = test::problem(test::marked(node(896, 4864), kGateUpSwigluAttr));
    std::vector<Tensor> inputs = at_addresses(p.inputs, 0x100000);
    inputs[3].data += 2;
    CHECK(address_error(p.plan(), inputs, at_addresses(p.outputs, 0x800000)).find(
              "W_up (input 3) is at device address 0x130002, which is not 4-byte aligned") != std::string::npos);

    test::Shapes shapes;
    shapes.activation = DataType::Float32;
    const test::Problem f32 = test::problem(node(4096, 1024), shapes);
    std::vector<Tensor> outputs = at_addresses(f32.outputs, 0x800000);
    outputs[0].data += 2;
    CHECK(address_error(f32.plan(), at_addresses(f32.inputs, 0x100000), outputs).find(
              "Y (output 0) is at device address 0x800002, which is not 4-byte aligned") != std::string::npos);
}

TEST_CASE("a present, non-empty tensor without a device address is refused")
{
    const test::Problem p = test::problem(node(896, 4864));
    std::vector<Tensor> inputs = at_addresses(p.inputs, 0x100000);
    inputs[2].data = 0;
    CHECK(address_error(p.plan(), inputs, at_addresses(p.outputs, 0x800000)) ==
          prefixed("scales (input 2) holds 272384 bytes but its device address is null. Why: "
                   "matmul_nbits_gemv_f16_scales_f16 would dereference address 0 and fault the CUDA context. How to "
                   "fix: pass the tensor's device pointer in Tensor::data"));

    test::Shapes shapes;
    shapes.activation = DataType::Float32;
    shapes.m = 3;
    const test::Problem gemm = test::problem(node(4096, 1024), shapes);
    std::vector<Tensor> outputs = at_addresses(gemm.outputs, 0x800000);
    outputs[0].data = 0;
    CHECK(address_error(gemm.plan(), at_addresses(gemm.inputs, 0x100000), outputs).find(
              "Y (output 0) holds 12288 bytes but its device address is null. Why: the cuBLASLt GEMM") !=
          std::string::npos);
}

TEST_CASE("an accuracy-level-4 plan without its workspace is refused with the original's message")
{
    test::Shapes shapes;
    shapes.activation = DataType::Float32;
    const test::Problem p = test::problem(node(4096, 1024, 4, 32, 4), shapes);
    CHECK(address_error(p.plan(), at_addresses(p.inputs, 0x100000), at_addresses(p.outputs, 0x800000), 0) ==
          prefixed("accuracy_level=4 GEMV workspace is unavailable"));
}

TEST_CASE("an empty plan needs no addresses at all")
{
    test::Shapes shapes;
    shapes.m = 0;
    const test::Problem p = test::problem(node(896, 4864), shapes);
    std::vector<Tensor> inputs = at_addresses(p.inputs, 0);
    CHECK(address_error(p.plan(), inputs, at_addresses(p.outputs, 0), 0) == "(no error)");
}
