// A program an inference engine would write: link nbits, ask for a runtime,
// and report what happened. It must link and start without a GPU driver.
#include <nbits/nbits.hpp>

#include <cstdio>

int main()
{
    std::printf("nbits %s with %zu embedded kernel sources\n", nbits::version(), nbits::kernels::all().size());
    try {
        nbits::CudaRuntime runtime;
        std::printf("device: %s\n", runtime.capabilities().name.c_str());
    } catch (const nbits::Error& error) {
        std::printf("no runtime (%s): %s\n", nbits::to_string(error.kind()), error.what());
        return error.kind() == nbits::ErrorKind::NoDriver || error.kind() == nbits::ErrorKind::NoDevice ? 0 : 1;
    }
    return 0;
}
