# nbits::cuda_libraries: NVRTC and cuBLASLt, linked by file. CMake's
# CUDA::nvrtc target also links libcuda (CUDA::cuda_driver), which nbits must
# not link: it opens the driver at run time, so that every binary starts on a
# machine without one. Used by the build and by the installed package.
if(NOT TARGET nbits::cuda_libraries)
  add_library(nbits::cuda_libraries INTERFACE IMPORTED)
  foreach(library nvrtc cublasLt)
    if(NOT TARGET CUDA::${library})
      message(FATAL_ERROR "nbits needs ${library} from the CUDA toolkit; it was not found")
    endif()
    get_target_property(location CUDA::${library} IMPORTED_LOCATION)
    set_property(TARGET nbits::cuda_libraries APPEND PROPERTY INTERFACE_LINK_LIBRARIES "${location}")
  endforeach()
endif()
