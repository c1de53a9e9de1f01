#pragma once

#include <cstddef>
#include <string>

namespace nbits::prewarm {

// "[ 12/124] compiled sm_90 gemv_f16:matmul_nbits_gemv_f16 (1.3 s)" on one
// line of a terminal, rewritten in place; silent when stderr is not a
// terminal (logs get the summary only). Messages always print, on a line
// of their own.
class ProgressLine {
public:
    explicit ProgressLine(std::size_t total);
    ~ProgressLine();
    void step(const std::string& text);
    void message(const std::string& text);

private:
    void clear_line();

    std::size_t total_;
    std::size_t done_ = 0;
    bool terminal_;
    bool shown_ = false;
};

}  // namespace nbits::prewarm
