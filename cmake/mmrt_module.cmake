# mmrt_module(NAME DEPS ...): a static library from every .cpp in the current folder
# (and sub-folders named in SUBDIRS). Files named *_avx512.cpp, *_avx512bf16.cpp,
# *_avx512vnni.cpp and *_avx2.cpp get the matching ISA flags; everything else stays portable x86-64.
function(mmrt_module name)
  cmake_parse_arguments(M "" "" "DEPS;SUBDIRS" ${ARGN})
  set(globs ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  foreach(d ${M_SUBDIRS})
    list(APPEND globs ${CMAKE_CURRENT_SOURCE_DIR}/${d}/*.cpp)
  endforeach()
  file(GLOB srcs CONFIGURE_DEPENDS ${globs})
  if(NOT srcs)
    add_library(mmrt_${name} INTERFACE)
    target_include_directories(mmrt_${name} INTERFACE ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(mmrt_${name} INTERFACE ${M_DEPS})
    return()
  endif()
  add_library(mmrt_${name} STATIC ${srcs})
  target_include_directories(mmrt_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(mmrt_${name} PUBLIC ${M_DEPS})
  foreach(s ${srcs})
    if(s MATCHES "_avx512bf16\\.cpp$")
      set_source_files_properties(${s} PROPERTIES COMPILE_OPTIONS
        "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512bf16;-mfma;-mf16c;-mavx2;-Wno-maybe-uninitialized")
    elseif(s MATCHES "_avx512vnni\\.cpp$")
      set_source_files_properties(${s} PROPERTIES COMPILE_OPTIONS
        "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mfma;-mf16c;-mavx2;-Wno-maybe-uninitialized")
    elseif(s MATCHES "_avx512\\.cpp$")
      set_source_files_properties(${s} PROPERTIES COMPILE_OPTIONS
        "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mfma;-mf16c;-mavx2;-Wno-maybe-uninitialized")
    elseif(s MATCHES "_avx2\\.cpp$")
      set_source_files_properties(${s} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
    endif()
  endforeach()
endfunction()

# mmrt_test(NAME LIBS ...): one GoogleTest binary from every .cpp in the current folder.
function(mmrt_test name)
  cmake_parse_arguments(T "" "" "LIBS;LABELS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  add_executable(test_${name} ${srcs})
  target_link_libraries(test_${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(test_${name} PRIVATE
    MMRT_SOURCE_DIR="${PROJECT_SOURCE_DIR}" MMRT_BINARY_DIR="${PROJECT_BINARY_DIR}")
  add_test(NAME ${name} COMMAND test_${name} --gtest_brief=1
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  if(T_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}")
  endif()
endfunction()
