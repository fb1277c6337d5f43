# TkregPack.cmake: build a tkreg kernel pack as part of a CMake (scikit-build-core) project.
#
# Shipped in the tkreg wheel with build_tools; a plugin's CMakeLists.txt finds it with
#
#   find_package(Python REQUIRED COMPONENTS Interpreter)
#   execute_process(COMMAND "${Python_EXECUTABLE}" -m build_tools cmake-dir
#                   OUTPUT_VARIABLE TKREG_CMAKE_DIR OUTPUT_STRIP_TRAILING_WHITESPACE)
#   include("${TKREG_CMAKE_DIR}/TkregPack.cmake")
#   tkreg_add_pack(SRC mypkg/kernels.py NAMESPACE mypkg DESTINATION mypkg/packs)
#
# tkreg_add_pack(SRC <module | file.py | folder> NAMESPACE <ns> DESTINATION <folder in the wheel>
#                [ARCHS <arch>...] [ONLY <op>...] [JOBS <n>] [TARGET <name>])
#
# Adds an always-run target that calls `python -m build_tools build` (its content-addressed
# compile cache, $TKREG_CACHE_DIR or ~/.cache/tkreg/build, makes unchanged re-runs cheap) and
# installs the pack (<arch>/manifest.json + cubins) to DESTINATION.  Defaults, in order: the
# argument, the CMake variable (-DTKREG_ARCHS=...; scikit-build-core sets it from the
# environment when the plugin's pyproject.toml maps it, see tkreg's README), the environment
# variable, then ARCHS "sm_90a;sm_100a" and JOBS = all cores.  Needs tkreg, tilelang 0.1.15 and
# nvcc 13.0 where the build runs; SRC is relative to the calling CMakeLists.txt's folder, which
# is also the tool's working directory (so a module name there imports).
include_guard(GLOBAL)

function(tkreg_add_pack)
  cmake_parse_arguments(PARSE_ARGV 0 ARG "" "SRC;NAMESPACE;DESTINATION;JOBS;TARGET" "ARCHS;ONLY")
  foreach(_req IN ITEMS SRC NAMESPACE DESTINATION)
    if(NOT ARG_${_req})
      message(FATAL_ERROR "tkreg_add_pack: ${_req} is required "
        "(tkreg_add_pack(SRC mypkg/kernels.py NAMESPACE mypkg DESTINATION mypkg/packs))")
    endif()
  endforeach()
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "tkreg_add_pack: unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT Python_EXECUTABLE)
    find_package(Python REQUIRED COMPONENTS Interpreter)
  endif()

  # ARCHS / ONLY / JOBS: argument, else CMake variable, else environment, else default.
  foreach(_opt IN ITEMS ARCHS ONLY JOBS)
    if(NOT ARG_${_opt})
      if(DEFINED TKREG_${_opt} AND NOT "${TKREG_${_opt}}" STREQUAL "")
        set(ARG_${_opt} "${TKREG_${_opt}}")
      elseif(DEFINED ENV{TKREG_${_opt}} AND NOT "$ENV{TKREG_${_opt}}" STREQUAL "")
        set(ARG_${_opt} "$ENV{TKREG_${_opt}}")
      endif()
    endif()
  endforeach()
  if(NOT ARG_ARCHS)
    set(ARG_ARCHS "sm_90a;sm_100a")
  endif()
  # Accept "sm_90a,sm_100a" and "sm_90a sm_100a" as well as a CMake list.
  string(REGEX REPLACE "[ ,]+" ";" ARG_ARCHS "${ARG_ARCHS}")
  string(REGEX REPLACE "[ ,]+" ";" ARG_ONLY "${ARG_ONLY}")
  list(REMOVE_ITEM ARG_ARCHS "")
  list(REMOVE_ITEM ARG_ONLY "")

  if(NOT ARG_TARGET)
    set(ARG_TARGET "tkreg_pack_${ARG_NAMESPACE}")
  endif()
  set(_src "${ARG_SRC}")
  if(NOT IS_ABSOLUTE "${_src}" AND EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/${_src}")
    set(_src "${CMAKE_CURRENT_SOURCE_DIR}/${_src}")
  endif()
  set(_out "${CMAKE_CURRENT_BINARY_DIR}/${ARG_TARGET}")
  set(_args build --src "${_src}" --namespace "${ARG_NAMESPACE}" --out "${_out}")
  foreach(_a IN LISTS ARG_ARCHS)
    list(APPEND _args --arch "${_a}")
  endforeach()
  foreach(_op IN LISTS ARG_ONLY)
    list(APPEND _args --only "${_op}")
  endforeach()
  if(NOT "${ARG_JOBS}" STREQUAL "")
    list(APPEND _args -j "${ARG_JOBS}")
  endif()
  message(STATUS "tkreg pack ${ARG_NAMESPACE}: src=${ARG_SRC} archs=${ARG_ARCHS} jobs=${ARG_JOBS} "
                 "-> ${ARG_DESTINATION}")

  # Never up to date: the tool runs on every build (its cache makes that cheap); the output
  # folder is emptied first so archs or ops dropped since the last build do not linger.
  add_custom_target(${ARG_TARGET} ALL
    COMMAND "${CMAKE_COMMAND}" -E rm -rf "${_out}"
    COMMAND "${Python_EXECUTABLE}" -m build_tools ${_args}
    WORKING_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}"
    COMMENT "Compiling tkreg kernel pack `${ARG_NAMESPACE}` (${ARG_ARCHS}) with python -m build_tools"
    USES_TERMINAL
    VERBATIM)
  install(DIRECTORY "${_out}/" DESTINATION "${ARG_DESTINATION}")
endfunction()
