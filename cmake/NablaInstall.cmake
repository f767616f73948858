# install() rules and the exported package: find_package(nabla) gives nabla::nabla.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(_nabla_targets GLOBAL PROPERTY NABLA_EXPORTED_TARGETS)
set(_nabla_helpers nabla_turbojpeg)
if(NABLA_HAS_CUDA)
  list(APPEND _nabla_helpers nabla_cudnn nabla_nccl)
endif()
install(TARGETS nabla ${_nabla_targets} ${_nabla_helpers} EXPORT nablaTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES "${NABLA_INCLUDE_ROOT}/nabla_generated/config.h" DESTINATION include/nabla_generated)
install(EXPORT nablaTargets NAMESPACE nabla:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/nabla)

configure_package_config_file(cmake/nablaConfig.cmake.in "${CMAKE_CURRENT_BINARY_DIR}/nablaConfig.cmake"
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/nabla)
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/nablaConfigVersion.cmake"
                                 COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/nablaConfig.cmake" "${CMAKE_CURRENT_BINARY_DIR}/nablaConfigVersion.cmake"
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/nabla)
install(FILES nabla.h DESTINATION include/nabla)
