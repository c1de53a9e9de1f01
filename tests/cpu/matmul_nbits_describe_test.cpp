// The plan dump: JSON that parses and stays byte-stable, and a readable page.

#include "matmul_nbits_fixtures.hpp"

#include <cctype>
#include <cmath>
#include <limits>

using namespace nbits;
using namespace nbits::ops;
using test::node;

namespace {

// A strict recursive-descent check of RFC 8259 syntax; enough to tell that a
// consumer's parser will accept the dump.
class JsonChecker {
public:
    explicit JsonChecker(const std::string& text) : text_(text) {}

    bool valid()
    {
        skip_space();
        if (!value()) {
            return false;
        }
        skip_space();
        return position_ == text_.size();
    }

private:
    bool value()
    {
        skip_space();
        if (position_ >= text_.size()) {
            return false;
        }
        switch (text_[position_]) {
        case '{': return object();
        case '[': return array();
        case '"': return string();
        case 't': return literal("true");
        case 'f': return literal("false");
        case 'n': return literal("null");
        default: return number();
        }
    }

    bool object()
    {
        ++position_;
        skip_space();
        if (peek('}')) {
            return true;
        }
        do {
            skip_space();
            if (!string()) {
                return false;
            }
            skip_space();
            if (!peek(':') || !value()) {
                return false;
            }
            skip_space();
        } while (peek(','));
        return peek('}');
    }

    bool array()
    {
        ++position_;
        skip_space();
        if (peek(']')) {
            return true;
        }
        do {
            if (!value()) {
                return false;
            }
            skip_space();
        } while (peek(','));
        return peek(']');
    }

    bool string()
    {
        if (!peek('"')) {
            return false;
        }
        while (position_ < text_.size()) {
            const char c = text_[position_++];
            if (c == '"') {
                return true;
            }
            if (static_cast<unsigned char>(c) < 0x20) {
                return false;
            }
            if (c == '\\') {
                if (position_ >= text_.size()) {
                    return false;
                }
                const char escaped = text_[position_++];
                if (escaped == 'u') {
                    for (int i = 0; i < 4; ++i) {
                        if (position_ >= text_.size() || !std::isxdigit(static_cast<unsigned char>(text_[position_++]))) {
                            return false;
                        }
                    }
                } else if (std::string("\"\\/bfnrt").find(escaped) == std::string::npos) {
                    return false;
                }
            }
        }
        return false;
    }

    bool number()
    {
        const std::size_t start = position_;
        peek('-');
        if (!digits()) {
            return false;
        }
        if (peek('.') && !digits()) {
            return false;
        }
        if (peek('e') || peek('E')) {
            if (!peek('+')) {
                peek('-');
            }
            if (!digits()) {
                return false;
            }
        }
        return position_ > start;
    }

    bool digits()
    {
        const std::size_t start = position_;
        while (position_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[position_]))) {
            ++position_;
        }
        return position_ > start;
    }

    bool literal(const char* word)
    {
        const std::string expected(word);
        if (text_.compare(position_, expected.size(), expected) != 0) {
            return false;
        }
        position_ += expected.size();
        return true;
    }

    bool peek(char c)
    {
        if (position_ < text_.size() && text_[position_] == c) {
            ++position_;
            return true;
        }
        return false;
    }

    void skip_space()
    {
        while (position_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[position_]))) {
            ++position_;
        }
    }

    const std::string& text_;
    std::size_t position_ = 0;
};

bool is_json(const std::string& text) { return JsonChecker(text).valid(); }

}  // namespace

TEST_CASE("the JSON checker itself tells valid from invalid documents")
{
    CHECK(is_json(R"({"a":[1,-2.5e-3,true,null,"x\"\u00e9"],"b":{}})"));
    CHECK_FALSE(is_json(R"({"a":1,})"));
    CHECK_FALSE(is_json(R"({"a":nan})"));
    CHECK_FALSE(is_json("{\"a\":\"line\nbreak\"}"));
}

TEST_CASE("every plan's JSON dump parses, kernel, GEMM and empty plans alike")
{
    test::Shapes f32_prefill;
    f32_prefill.activation = DataType::Float32;
    f32_prefill.m = 3;
    f32_prefill.bias = true;
    test::Shapes normed;
    normed.gamma = DataType::Float32;
    normed.bias = true;
    test::Shapes empty;
    empty.m = 0;
    test::Shapes gate_up_prefill;
    gate_up_prefill.m = 3;
    for (const test::Problem& p :
         {test::problem(node(4864, 896)), test::problem(node(4096, 1024), f32_prefill),
          test::problem(test::marked(node(896, 1152), kRmsNormPrologueAttr), normed), test::problem(node(64, 8), empty),
          test::problem(test::marked(node(896, 4864), kGateUpSwigluAttr), gate_up_prefill)}) {
        const LaunchPlan plan = p.plan();
        INFO(plan.to_json());
        CHECK(is_json(plan.to_json()));
        CHECK(plan.to_json() == p.plan().to_json());
        CHECK(plan.describe().find("policy: original\nvariant: " + plan.variant + "\n") == 0);
    }
}

TEST_CASE("a non-finite epsilon still dumps valid JSON")
{
    NodeAttributes attributes = test::marked(node(896, 1152), kRmsNormPrologueAttr);
    attributes.set(kRmsNormEpsilonAttr, std::numeric_limits<float>::quiet_NaN());
    test::Shapes shapes;
    shapes.gamma = DataType::Float16;
    const std::string json = test::problem(attributes, shapes).plan().to_json();
    CHECK(is_json(json));
    // JSON has no NaN: the writer puts null.
    CHECK(json.find(R"("f32": null)") != std::string::npos);
}

TEST_CASE("the JSON dump of a decode plan is stable, field for field")
{
    // The dump is indented; its content, without the whitespace between tokens:
    auto compact = [](const std::string& json) {
        std::string out;
        bool in_string = false;
        for (std::size_t i = 0; i < json.size(); ++i) {
            const char c = json[i];
            if (in_string && c == '\\') {
                out += c;
                out += json[++i];
                continue;
            }
            in_string = c == '"' ? !in_string : in_string;
            if (in_string || (c != ' ' && c != '\n')) {
                out += c;
            }
        }
        return out;
    };
    const LaunchPlan plan = test::problem(node(64, 8, 8, 32)).plan();
    CHECK(compact(plan.to_json()) ==
          R"json({"policy":"original","variant":"gemv_int8_f16","reason":"M==1 decode: fp16 activation, bits=8, )json"
          R"json(block_size=32, zero_points=false → direct capture-safe GEMV","bias_stage":null,)json"
          R"json("bias_stage_reason":null,"capture_safe":true,"checks_group_indices":false,"flops":1024,)json"
          R"json("scratch_bytes":[],"workspace_bytes":0,"steps":[{"kind":"kernel",)json"
          R"json("source":"gemv_f16","entry":"matmul_nbits_gemv_int8_f16","what":"MatMulNBits int8 fp16 GEMV",)json"
          R"json("defines":[],"grid":[4,1,1],"block":[64,1,1],"dynamic_shared_bytes":0,)json"
          R"json("configure_shared_memory":false,"programmatic_dependent":false,"args":[)json"
          R"json({"pointer":{"buffer":"input","index":0,"offset":0}},{"pointer":{"buffer":"input","index":1,"offset":0}},)json"
          R"json({"pointer":{"buffer":"input","index":2,"offset":0}},{"pointer":{"buffer":"null","index":0,"offset":0}},)json"
          R"json({"pointer":{"buffer":"null","index":0,"offset":0}},{"pointer":{"buffer":"output","index":0,"offset":0}},)json"
          R"json({"i32":64},{"i32":8},{"i32":2},{"i32":1},{"i32":0}],"alignment":[{"tensor":"A (input 0)",)json"
          R"json("pointer":{"buffer":"input","index":0,"offset":0},"bytes":16},{"tensor":"B (input 1)",)json"
          R"json("pointer":{"buffer":"input","index":1,"offset":0},"bytes":8},{"tensor":"scales (input 2)",)json"
          R"json("pointer":{"buffer":"input","index":2,"offset":0},"bytes":2},{"tensor":"Y (output 0)",)json"
          R"json("pointer":{"buffer":"output","index":0,"offset":0},"bytes":2}]}]})json");
}

TEST_CASE("the readable dump names the variant, the launches and what runs after them")
{
    test::Shapes prefill;
    prefill.activation = DataType::Float32;
    prefill.m = 2;
    const std::string text = test::problem(node(64, 8), prefill).plan().describe();
    CHECK(text ==
          "policy: original\n"
          "variant: dequant_cublas_gemm\n"
          "reason: M=2, accuracy_level=0, g_idx=false → dequantize weights to f32 then cuBLAS GEMM (general prefill "
          "/ grouped path)\n"
          "capture safe: yes\n"
          "flops: 2048\n"
          "scratch[0]: 2048 bytes\n"
          "scratch[1]: 33554432 bytes\n"
          "steps: 2\n"
          "  kernel matmul_nbits_dequant_f32 (dequant.cu) — MatMulNBits dequant\n"
          "    grid 2x1x1 block 256x1x1 shared 0 bytes\n"
          "    args: input[1], input[2], null, null, scratch[0], i32 64, i32 8, i32 32, i32 2, i32 16, i32 1, i32 4\n"
          "    align scales (input 2) to 4 bytes\n"
          "  cuBLASLt GEMM Float32 Y[2x8] = A[2x64] · W(KxN): a=input[0], w=scratch[0], y=output[0], bias=null, "
          "workspace=scratch[1] (33554432 bytes)\n");
    test::Shapes empty;
    empty.m = 0;
    CHECK(test::problem(node(64, 8), empty).plan().describe().find("steps: none (nothing to launch)\n") !=
          std::string::npos);
}
