# npuflow_layer(NAME SOURCES ... DEPS ...): one static library per layer folder.
function(npuflow_layer name)
  cmake_parse_arguments(L "" "" "SOURCES;DEPS" ${ARGN})
  add_library(npuflow_${name} STATIC ${L_SOURCES})
  target_include_directories(npuflow_${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(npuflow_${name} PUBLIC ${L_DEPS})
  if(NPUFLOW_UNITY)
    set_target_properties(npuflow_${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
endfunction()

# npuflow_test(NAME SOURCES ... DEPS ... [LABELS ...]): one GoogleTest binary, registered with ctest.
function(npuflow_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_DEPS} GTest::gtest GTest::gtest_main Threads::Threads)
  # The test's own code builds at -O1 in Release: the code under test is the libraries, built at
  # -O3, and a test file at -O3 took 50 s to compile against 35 s at -O1 (CI builds 67 of them).
  target_compile_options(${name} PRIVATE $<$<CONFIG:Release>:-O1>)
  # In the ASan tree at -O0: a test file compiled in 17 s there against 29 s at -O1
  # (tests/scheduler/session_test.cc), and test files are most of that tree's compile time. The
  # libraries under test keep -O1; the tests' own code runs slower, and ASan checks it as well.
  if(NPUFLOW_SANITIZER STREQUAL "address")
    target_compile_options(${name} PRIVATE -O0)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}")
endfunction()
