# nbits_embed_sources(<target> FUNCTION <qualified-name> DIR <dir> OUTPUT <file.cpp>)
#
# Turns every *.cu and *.cuh file under DIR into string constants compiled into
# <target>: a generated C++ file defines `const nbits::jit::EmbeddedFileSet&
# <qualified-name>()`, listing each file's path relative to DIR and its text
# (jit::KernelSource parses the entries and their parameters from it). The
# generated file is rebuilt whenever a kernel file changes.
function(nbits_embed_sources target)
  cmake_parse_arguments(ARG "" "FUNCTION;DIR;OUTPUT" "" ${ARGN})
  file(GLOB_RECURSE files CONFIGURE_DEPENDS
       RELATIVE "${ARG_DIR}" "${ARG_DIR}/*.cu" "${ARG_DIR}/*.cuh")
  list(SORT files)
  set(absolute_files "")
  foreach(file IN LISTS files)
    list(APPEND absolute_files "${ARG_DIR}/${file}")
  endforeach()
  add_custom_command(
    OUTPUT "${ARG_OUTPUT}"
    COMMAND "${CMAKE_COMMAND}"
            "-DFUNCTION=${ARG_FUNCTION}"
            "-DDIR=${ARG_DIR}"
            "-DFILES=${files}"
            "-DOUTPUT=${ARG_OUTPUT}"
            -P "${NBITS_CMAKE_DIR}/embed_sources_script.cmake"
    DEPENDS ${absolute_files} "${NBITS_CMAKE_DIR}/embed_sources_script.cmake"
    COMMENT "Embedding kernel sources of ${ARG_DIR}"
    VERBATIM)
  target_sources(${target} PRIVATE "${ARG_OUTPUT}")
endfunction()
