# Script mode helper of EmbedSources.cmake: writes OUTPUT from FILES under DIR.
set(delimiter "nbits_src")
string(REGEX REPLACE "::[^:]+$" "" namespace "${FUNCTION}")
string(REGEX REPLACE "^.*::" "" function_name "${FUNCTION}")

set(body "")
set(table "")
set(index 0)
foreach(file IN LISTS FILES)
  file(READ "${DIR}/${file}" text)
  string(FIND "${text}" ")${delimiter}\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${file} contains the raw-string delimiter )${delimiter}\"")
  endif()
  string(APPEND body "const char text_${index}[] = R\"${delimiter}(${text})${delimiter}\";\n")
  string(APPEND body "\n")
  string(APPEND table "    {\"${file}\", text_${index}, sizeof(text_${index}) - 1},\n")
  math(EXPR index "${index} + 1")
endforeach()

set(content "// Generated from ${DIR} by cmake/EmbedSources.cmake. Do not edit.
#include \"jit/embedded.hpp\"

namespace {

${body}const nbits::jit::EmbeddedFile files[] = {
${table}};

}  // namespace

namespace ${namespace} {

const nbits::jit::EmbeddedFileSet& ${function_name}()
{
    static const nbits::jit::EmbeddedFileSet set{files, sizeof(files) / sizeof(files[0])};
    return set;
}

}  // namespace ${namespace}
")
file(WRITE "${OUTPUT}.tmp" "${content}")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
