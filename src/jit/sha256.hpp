#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace nbits::jit {

// SHA-256 (FIPS 180-4): content identity for kernel sources and cache files.
class Sha256 {
public:
    Sha256();
    Sha256& update(const void* data, std::size_t size);
    Sha256& update(std::string_view text) { return update(text.data(), text.size()); }
    // Length-prefixed, so that ("ab","c") and ("a","bc") differ.
    Sha256& update_field(std::string_view text);
    std::array<std::uint8_t, 32> finish();
    std::string finish_hex();

private:
    void compress(const std::uint8_t* block);

    std::array<std::uint32_t, 8> state_;
    std::array<std::uint8_t, 64> buffer_{};
    std::size_t buffered_ = 0;
    std::uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view text);

}  // namespace nbits::jit
