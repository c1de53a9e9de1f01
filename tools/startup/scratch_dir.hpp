#pragma once

#include <string>

namespace nbits::startup {

// A directory of throw-away cache directories, removed with its contents.
class ScratchDir {
public:
    // Under `parent`, or $TMPDIR (else /tmp) when it is empty. Throws Error(Io).
    explicit ScratchDir(const std::string& parent);
    ~ScratchDir();
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;

    // A path inside it (not created: the disk cache creates its directory).
    std::string path(const std::string& leaf) const { return root_ + "/" + leaf; }

private:
    std::string root_;
};

}  // namespace nbits::startup
