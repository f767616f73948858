# Compiler settings shared by every nabla target.
# ccache, with the source root as its base_dir: it rewrites absolute paths under that root to
# relative ones before hashing, so a fresh clone in another folder (as CI makes) hits the cache
# that an earlier clone filled. With -g (the debug preset) ccache also hashes the working folder
# unless told not to (CCACHE_NOHASHDIR), so every fresh clone missed there; the price is that a
# cached object's debug info may name the folder of the clone that compiled it first. Passed
# through env because Debian 12's ccache 4.7 takes no key=value settings on its command line.
# Nothing else may put an absolute path of the source or build tree into a compile command
# (tests/test_paths.h says how tests find their files).
find_program(NABLA_CCACHE ccache)
if(NABLA_CCACHE)
  set(nabla_ccache_launcher /usr/bin/env "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" CCACHE_NOHASHDIR=1
                            "${NABLA_CCACHE}")
  set(CMAKE_CXX_COMPILER_LAUNCHER ${nabla_ccache_launcher})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${nabla_ccache_launcher})
endif()

add_library(nabla_warnings INTERFACE)
target_compile_options(nabla_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)

find_package(OpenMP REQUIRED COMPONENTS CXX)
