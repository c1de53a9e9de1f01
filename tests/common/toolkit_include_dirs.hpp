#pragma once

#include <string>
#include <vector>

namespace nbits::test {

// The CUDA toolkit include directories that hold cuda_fp16.h, for the
// original kernels the tests compile as oracles (they include <cuda_fp16.h>;
// nbits' own kernels need no include directory). Looked for in
// $CUDA_HOME/include, $CUDA_PATH/include and /usr/local/cuda/include, in
// that order, without repeats; empty when none holds the header.
std::vector<std::string> toolkit_include_dirs();

}  // namespace nbits::test
