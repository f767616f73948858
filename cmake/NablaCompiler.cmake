# Compiler settings shared by every nabla target.
find_program(NABLA_CCACHE ccache)
if(NABLA_CCACHE)
  set(CMAKE_CXX_COMPILER_LAUNCHER "${NABLA_CCACHE}")
  set(CMAKE_CUDA_COMPILER_LAUNCHER "${NABLA_CCACHE}")
endif()

add_library(nabla_warnings INTERFACE)
target_compile_options(nabla_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)

find_package(OpenMP REQUIRED COMPONENTS CXX)
