#include "nbits/error.hpp"
#include "jit/compile.hpp"
#include "jit/image_store.hpp"
#include "jit/kernel_source.hpp"
#include "jit/sha256.hpp"
#include "jit/target.hpp"
#include "kernels.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

using namespace nbits;

TEST_CASE("sha256 matches the FIPS 180-4 test vectors")
{
    CHECK(jit::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(jit::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(jit::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    std::string million(1000000, 'a');
    CHECK(jit::sha256_hex(million) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("targets parse from sm_XY and compute_XY and nothing else")
{
    CHECK(jit::Target::parse("sm_90") == jit::Target::cubin(9, 0));
    CHECK(jit::Target::parse("compute_80") == jit::Target::ptx(8, 0));
    CHECK(jit::Target::parse("sm_89").str() == "sm_89");
    CHECK(jit::Target::ptx(8, 6).str() == "compute_86");
    // Arch-specific targets (wgmma on sm_90a) differ from the plain ones.
    CHECK(jit::Target::parse("sm_90a") == jit::Target::cubin(9, 0, true));
    CHECK(jit::Target::parse("compute_90a").str() == "compute_90a");
    CHECK(jit::Target::parse("sm_90a") != jit::Target::cubin(9, 0));
    for (const char* bad : {"90", "sm90", "sm_", "sm_9x", "compute_", "gfx90a", "sm_1234", "sm_9a", "sm_90b"}) {
        CAPTURE(bad);
        CHECK_THROWS_AS(jit::Target::parse(bad), Error);
    }
}

TEST_CASE("a kernel source keeps exactly the headers it reaches, and its digest covers them")
{
    const std::vector<jit::Header> headers = {
        {"a.cuh", "#pragma once\n#include \"b.cuh\"\n"},
        {"b.cuh", "#pragma once\nint b;\n"},
        {"unused.cuh", "int unused;\n"},
    };
    const jit::KernelSource source("k", "#include \"a.cuh\"\nextern \"C\" __global__ void k_one(int x) {}\n"
                                        "extern \"C\" __global__ void k_two(\n) {}\n",
                                   headers);
    REQUIRE(source.headers().size() == 2);
    CHECK(source.headers()[0].name == "a.cuh");
    CHECK(source.headers()[1].name == "b.cuh");
    CHECK(source.entries() == std::vector<std::string>{"k_one", "k_two"});
    CHECK(source.has_entry("k_two"));
    CHECK_FALSE(source.has_entry("k_three"));

    const jit::KernelSource same("other name", source.text(), headers);
    CHECK(same.digest() == source.digest());

    auto changed = headers;
    changed[1].text += " ";
    CHECK(jit::KernelSource("k", source.text(), changed).digest() != source.digest());
    auto unrelated = headers;
    unrelated[2].text += " ";
    CHECK(jit::KernelSource("k", source.text(), unrelated).digest() == source.digest());
    CHECK(jit::KernelSource("k", source.text() + "\n", headers).digest() != source.digest());
}

TEST_CASE("a compile error carries the NVRTC log and the options")
{
    const jit::KernelSource broken("broken", "extern \"C\" __global__ void broken_entry() { undeclared_name = 1; }\n");
    jit::CompileRequest request;
    request.source = &broken;
    request.target = jit::Target::ptx(8, 0);
    try {
        jit::compile(request);
        FAIL("compiling a broken source must throw");
    } catch (const Error& error) {
        CHECK(error.kind() == ErrorKind::Compile);
        const std::string message = error.what();
        CHECK(message.find("broken.cu") != std::string::npos);
        CHECK(message.find("undeclared_name") != std::string::npos);
        CHECK(message.find("--gpu-architecture=compute_80") != std::string::npos);
    }
}

TEST_CASE("asking to compile an entry the source does not declare is an argument error")
{
    const jit::KernelSource source("tiny", "extern \"C\" __global__ void tiny_entry() {}\n");
    jit::CompileRequest request;
    request.source = &source;
    request.entries = {"other_entry"};
    request.target = jit::Target::ptx(8, 0);
    CHECK_THROWS_WITH_AS(jit::compile(request), doctest::Contains("no entry 'other_entry'"), Error);
}

TEST_CASE("every kernels_cu entry sits alone behind its per-entry compile guard")
{
    for (const jit::KernelSource& source : kernels::all()) {
        const std::string& text = source.text();
        for (const std::string& entry : source.entries()) {
            CAPTURE(source.name());
            CAPTURE(entry);
            // The declaration, with or without __launch_bounds__, and the guard that opens before it.
            const std::size_t declared = text.find(" " + entry + "(", text.find("extern \"C\" __global__ void"));
            REQUIRE(declared != std::string::npos);
            const std::size_t guard = text.rfind("#if NBITS_ALL_ENTRIES || NBITS_ENTRY_" + entry + "\n", declared);
            REQUIRE(guard != std::string::npos);
            CHECK(text.find("#endif", guard) > declared);
            CHECK(text.find("extern \"C\" __global__", guard) < declared);
        }
    }
}

TEST_CASE("one entry compiled alone yields a module holding that entry only")
{
    const jit::KernelSource& source = kernels::source_of_entry("matmul_nbits_gemv_f32");
    jit::CompileRequest request;
    request.source = &source;
    request.entries = {"matmul_nbits_gemv_f32"};
    request.target = jit::Target::ptx(8, 0);
    const jit::CompiledImage image = jit::compile(request);
    CHECK(image.image.find(".entry matmul_nbits_gemv_f32(") != std::string::npos);
    for (const std::string& other : source.entries()) {
        if (other != "matmul_nbits_gemv_f32") {
            CAPTURE(other);
            CHECK(image.image.find(".entry " + other + "(") == std::string::npos);
        }
    }
}

TEST_SUITE("compile-all")
{
    // NVRTC has no default include path and no built-in cuda_fp16.h, so a
    // source that reached for a toolkit header would fail here: this is what
    // makes the compile below a proof that the runtime needs none.
    TEST_CASE("without an include directory NVRTC cannot see the CUDA toolkit's headers")
    {
        const jit::KernelSource toolkit_user("toolkit_user", "#include <cuda_fp16.h>\n"
                                                             "extern \"C\" __global__ void toolkit_user_entry() {}\n");
        jit::CompileRequest request;
        request.source = &toolkit_user;
        request.target = jit::Target::ptx(8, 0);
        CHECK_THROWS_WITH_AS(jit::compile(request), doctest::Contains("cuda_fp16.h"), Error);
    }

    TEST_CASE("every embedded kernel source compiles for sm_80, sm_86, sm_89, sm_90 and compute_80 with no include "
              "directory")
    {
        REQUIRE(!kernels::all().empty());
        for (const char* target : {"sm_80", "sm_86", "sm_89", "sm_90", "compute_80"}) {
            for (const jit::KernelSource& source : kernels::all()) {
                CAPTURE(target);
                CAPTURE(source.name());
                REQUIRE(source.include_dirs().empty());
                jit::CompileRequest request;
                request.source = &source;
                request.target = jit::Target::parse(target);
                const jit::CompiledImage image = jit::compile(request);
                CHECK(!image.image.empty());
                for (const std::string& option : image.options) {
                    CHECK(option.rfind("-I", 0) == std::string::npos);
                }
                if (request.target.kind == jit::ImageKind::Ptx) {
                    for (const std::string& entry : source.entries()) {
                        CHECK(image.image.find(".entry " + entry + "(") != std::string::npos);
                    }
                }
            }
        }
    }
}

TEST_CASE("the sm_90a wgmma prefill GEMM compiles for compute_90a in every dtype, bits, entry and token tile")
{
    const jit::KernelSource& source = kernels::source_of_entry("nbits_prefill_gemm");
    for (const char* entry : {"nbits_prefill_gemm", "nbits_prefill_gate_up"}) {
        for (const int bf16 : {0, 1}) {
            for (const int bits : {4, 8}) {
                // 128 tokens a CTA (m64n128k16), and 64 for M <= 64 (m64n64k16).
                for (const int tokens : {128, 64}) {
                    CAPTURE(entry);
                    CAPTURE(bf16);
                    CAPTURE(bits);
                    CAPTURE(tokens);
                    jit::CompileRequest request;
                    request.source = &source;
                    request.entries = {entry};
                    request.defines = {"NBITS_WGMMA=1", "NBITS_TILE_N=128", fmt::format("NBITS_TILE_M={}", tokens),
                                       "NBITS_TILE_K=64", "NBITS_WARPS_N=8", "NBITS_WARPS_M=1", "NBITS_WARPS_K=1",
                                       "NBITS_STAGES=4", "NBITS_K=1000", "NBITS_HAS_ZP=1",
                                       fmt::format("NBITS_ACT_BF16={}", bf16), fmt::format("NBITS_BITS={}", bits),
                                       "NBITS_BLOCK_SIZE=16"};
                    request.target = jit::Target::ptx(9, 0, true);
                    const jit::CompiledImage image = jit::compile(request);
                    CHECK(image.image.find(".target sm_90a") != std::string::npos);
                    const std::string instruction =
                        fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16.f32.{}", tokens, bf16 ? "bf16.bf16" : "f16.f16");
                    CHECK(image.image.find(instruction) != std::string::npos);
                    request.target = jit::Target::cubin(9, 0, true);
                    CHECK_FALSE(jit::compile(request).image.empty());
                }
            }
        }
    }
}

TEST_CASE("the split-K prefill GEMM compiles to a cluster kernel for compute_90 and compute_90a, 256 wgmma rows too")
{
    const jit::KernelSource& source = kernels::source_of_entry("nbits_prefill_gemm");
    for (const char* entry : {"nbits_prefill_gemm", "nbits_prefill_gate_up"}) {
        // The mma.sync GEMM, and the wgmma GEMM with 128 and 256 weight rows a CTA.
        for (const int wgmma_rows : {0, 128, 256}) {
            const bool wgmma = wgmma_rows != 0;
            CAPTURE(entry);
            CAPTURE(wgmma_rows);
            jit::CompileRequest request;
            request.source = &source;
            request.entries = {entry};
            request.defines = {"NBITS_SPLIT_K=3", "NBITS_K=1003", "NBITS_HAS_ZP=1", "NBITS_BLOCK_SIZE=16"};
            if (wgmma) {
                request.defines.insert(request.defines.end(),
                                       {"NBITS_WGMMA=1", fmt::format("NBITS_TILE_N={}", wgmma_rows),
                                        "NBITS_TILE_M=128", "NBITS_TILE_K=64",
                                        fmt::format("NBITS_WARPS_N={}", wgmma_rows / 16), "NBITS_WARPS_M=1",
                                        "NBITS_WARPS_K=1"});
            }
            request.target = jit::Target::ptx(9, 0, wgmma);
            const std::string ptx = jit::compile(request).image;
            CHECK(ptx.find(".reqnctapercluster 1, 1, 3") != std::string::npos);
            CHECK(ptx.find("barrier.cluster.arrive.release.aligned") != std::string::npos);
            CHECK(ptx.find("mapa.shared::cluster") != std::string::npos);
            CHECK(ptx.find("ld.shared::cluster.v4.f32") != std::string::npos);
            // Without a split: no cluster.
            request.defines.erase(request.defines.begin());
            CHECK(jit::compile(request).image.find("cluster") == std::string::npos);
        }
    }
}

TEST_CASE("an image key names include directories by their fp16 headers' content, not their path")
{
    const std::string root = std::string(NBITS_BINARY_DIR) + "/tests/include-identity";
    auto write = [](const std::string& path, const std::string& text) {
        std::ofstream(path, std::ios::binary) << text;
    };
    for (const char* dir : {"a", "b", "c"}) {
        std::filesystem::create_directories(root + "/" + dir);
        write(root + "/" + dir + "/cuda_fp16.h", "#include \"cuda_fp16.hpp\"\n");
        write(root + "/" + dir + "/cuda_fp16.hpp", std::string("// half ") + (dir[0] == 'c' ? "v2" : "v1") + "\n");
    }
    auto key_with = [&](const std::string& dir) {
        const jit::KernelSource source("tiny", "extern \"C\" __global__ void tiny_entry() {}\n", {},
                                       {root + "/" + dir});
        jit::CompileRequest request;
        request.source = &source;
        request.target = jit::Target::cubin(9, 0);
        return jit::ImageKey::for_request(request).canonical();
    };
    CHECK(key_with("a") == key_with("b"));
    CHECK(key_with("a") != key_with("c"));
    CHECK(key_with("a").find(root) == std::string::npos);
}
