# crescent's CMake helpers: one function per kind of target, used everywhere.
#
#   cr_layer(<name> SOURCES <c files> DEPS <targets>)
#       One layer of the code (src/<name>/). Builds the object library
#       crescent_<name>_obj and the static library crescent_<name>. The only
#       include roots a layer's files see are its own and those of the layers
#       named in DEPS (and theirs): each root is a directory holding a single
#       link <name> -> src/<name>, so `#include "store/x.h"` from a layer that
#       does not depend on the store is a build error, not a convention.
#
#   cr_test(<name> SOURCES <c files> LIBS <targets> [TIMEOUT s] [ENV k=v ...]
#           [COMMAND args...])
#       A test executable registered with CTest: exit 0 passes, 77 is a skip
#       (reported as skipped, never as passed), anything else fails. Without
#       COMMAND the executable itself runs. Unit tests link cmocka.
#
#   cr_test_command(<name> COMMAND args... [TIMEOUT s] [ENV k=v ...] [LABELS l ...]
#                   [WORKING_DIRECTORY dir])
#       A CTest entry running an existing program (tool smoke tests, fuzz
#       smoke runs, pytest), with the same skip code.
#
# These two are the only way a test is registered: scripts/check-tests.sh
# (CTest test_registration_check) fails on an add_test() anywhere else.
# Multi-process tests link crescent_testing (tests/testing/), whose spawner
# lives in tools/common (crescent_tool_util) so the tools share it.

set(CR_LAYER_ROOTS ${CMAKE_BINARY_DIR}/layers)

function(cr_layer name)
  cmake_parse_arguments(L "" "" "SOURCES;DEPS" ${ARGN})
  set(root ${CR_LAYER_ROOTS}/${name})
  file(MAKE_DIRECTORY ${root})
  if(NOT EXISTS ${root}/${name})
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/src/${name} ${root}/${name} SYMBOLIC)
  endif()
  add_library(crescent_${name}_obj OBJECT ${L_SOURCES})
  target_include_directories(crescent_${name}_obj PUBLIC ${CMAKE_SOURCE_DIR}/include ${root})
  target_link_libraries(crescent_${name}_obj PUBLIC ${L_DEPS})
  add_library(crescent_${name} STATIC $<TARGET_OBJECTS:crescent_${name}_obj>)
  target_include_directories(crescent_${name} PUBLIC ${CMAKE_SOURCE_DIR}/include ${root})
  target_link_libraries(crescent_${name} PUBLIC ${L_DEPS})
endfunction()

function(cr_test name)
  if(NOT CRESCENT_TESTS)
    return()
  endif()
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;ENV;COMMAND" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} PkgConfig::CMOCKA)
  if(T_COMMAND)
    add_test(NAME ${name} COMMAND ${T_COMMAND})
  else()
    add_test(NAME ${name} COMMAND ${name})
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77)
  if(T_ENV)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${T_ENV}")
  endif()
endfunction()

function(cr_test_command name)
  if(NOT CRESCENT_TESTS)
    return()
  endif()
  cmake_parse_arguments(T "" "TIMEOUT;WORKING_DIRECTORY" "ENV;COMMAND;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  if(T_WORKING_DIRECTORY)
    add_test(NAME ${name} COMMAND ${T_COMMAND} WORKING_DIRECTORY ${T_WORKING_DIRECTORY})
  else()
    add_test(NAME ${name} COMMAND ${T_COMMAND})
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77)
  if(T_ENV)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${T_ENV}")
  endif()
  if(T_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}")
  endif()
endfunction()

# cr_test_disable(<name> REASON text): keep a registered test but do not run
# it (CTest lists it as "Not Run (Disabled)", never as passed). For an open
# defect that is written up (the reason names it); not for skipping.
function(cr_test_disable name)
  cmake_parse_arguments(T "" "REASON" "" ${ARGN})
  if(NOT T_REASON)
    message(FATAL_ERROR "cr_test_disable(${name}): a REASON is required")
  endif()
  if(TEST ${name})
    set_tests_properties(${name} PROPERTIES DISABLED TRUE)
    message(STATUS "crescent: test ${name} disabled: ${T_REASON}")
  endif()
endfunction()
