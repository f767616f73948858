# Third-party dependencies, all from Debian packages (scripts/install-deps.sh installs them).
# Header-only or static forms are preferred, so that binaries carry to the GPU machine,
# which has none of these packages.
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 CONFIG QUIET)
find_package(ZLIB REQUIRED)

# libturbojpeg0-dev ships no CMake config; the static archive keeps binaries portable.
find_path(TURBOJPEG_INCLUDE_DIR turbojpeg.h REQUIRED)
find_library(TURBOJPEG_LIBRARY NAMES libturbojpeg.a turbojpeg REQUIRED)
if(NOT TARGET nabla_turbojpeg)
  add_library(nabla_turbojpeg INTERFACE)
  target_include_directories(nabla_turbojpeg SYSTEM INTERFACE "${TURBOJPEG_INCLUDE_DIR}")
  target_link_libraries(nabla_turbojpeg INTERFACE "${TURBOJPEG_LIBRARY}")
endif()
