# nabla_add_library(<name> SOURCES ... [CUDA_SOURCES ...] [PUBLIC ...] [PRIVATE ...])
# Declares the library for one folder: target nabla_<name>, alias nabla::<name>, exported as
# nabla::<name>. The folder's public headers install to include/nabla/<name>/: the internal ones,
# under detail/, in the step compiler's fusion/ and in the backend folders cpu/ and cuda/, do not
# (core installs its public CUDA runtime headers itself; tools/check_layers.py checks that no
# public header includes an internal one). A folder with no sources yet is an INTERFACE library, so the layout and the
# link graph exist from day one.
function(nabla_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;CUDA_SOURCES;PUBLIC;PRIVATE" ${ARGN})
  set(target nabla_${name})
  set(sources ${ARG_SOURCES})
  if(NABLA_HAS_CUDA)
    list(APPEND sources ${ARG_CUDA_SOURCES})
  endif()
  if(sources)
    add_library(${target} STATIC ${sources})
    target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${NABLA_INCLUDE_ROOT}>
                                                $<INSTALL_INTERFACE:include>)
    target_link_libraries(${target} PUBLIC ${ARG_PUBLIC} PRIVATE $<BUILD_INTERFACE:nabla_warnings> ${ARG_PRIVATE})
    set(scope PUBLIC)
  else()
    add_library(${target} INTERFACE)
    target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${NABLA_INCLUDE_ROOT}>
                                                   $<INSTALL_INTERFACE:include>)
    target_link_libraries(${target} INTERFACE ${ARG_PUBLIC})
  endif()
  add_library(nabla::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  set_property(GLOBAL APPEND PROPERTY NABLA_EXPORTED_TARGETS ${target})
  install(DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}/" DESTINATION include/nabla/${name}
          FILES_MATCHING PATTERN "*.h" PATTERN "CMakeFiles" EXCLUDE PATTERN "detail" EXCLUDE
          PATTERN "cpu" EXCLUDE PATTERN "cuda" EXCLUDE PATTERN "fusion" EXCLUDE)
endfunction()
