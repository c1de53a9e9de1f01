#include "nbits/nbits.hpp"

namespace nbits {

const char* version() { return NBITS_VERSION; }

}  // namespace nbits
