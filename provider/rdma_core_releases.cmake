# Which rdma-core release the installed libibverbs is, and which of the
# layouts uroce knows it has (included by the top CMakeLists.txt).
#
# The provider lives inside libibverbs: libibverbs loads
# lib<name>-rdmav<N>.so for its private ABI N, the provider registers with
# verbs_register_driver_<N>, and from then on both sides read the same
# structures by offset. N alone does not name those structures: rdma-core
# added ops to verbs_context_ops (v36, v62) and members to ibv_qp_ex, which
# moves verbs_qp's comp_mask that libibverbs' ibv_qp_to_qp_ex reads (v44,
# v45), without changing N. So a layout is a row of UROCE_LAYOUTS:
#
#   ABI  first  end  ops  qp_ex
#
# the private ABI, the releases it covers (first to end - 1), the release
# whose verbs_context_ops (UROCE_OPS_LAYOUT) and whose ibv_qp_ex
# (UROCE_QP_EX_LAYOUT) it has; emulator/protocol/driver_abi.h declares
# each. The floor is v37, the first libibverbs that exports __verbs_log
# (the provider's error reports); v34-v36 have ABI 34 too.
#
# Outputs: UROCE_PABI, UROCE_OPS_LAYOUT, UROCE_QP_EX_LAYOUT,
# UROCE_HAVE_ATOMIC_WRITE, UROCE_RDMA_CORE_RELEASE (the release configured
# against), UROCE_RDMA_CORE_FIRST and UROCE_RDMA_CORE_END (the range the
# build's layout covers: the package's dependency, the provider's check
# at load).
set(UROCE_LAYOUTS
    "34 37 44 36 36"
    "34 44 45 36 44"
    "34 45 57 36 45"
    "57 57 59 36 45"
    "59 59 62 59 45"
    "59 62 64 62 45"
    "64 64 65 64 45"
    "65 65 66 65 45")
set(UROCE_RDMA_CORE_FLOOR 37)

# "v37-v43" (or "v44") for the releases from `first` to before `end`.
function(uroce_release_range first end out)
  math(EXPR last "${end} - 1")
  if(first EQUAL last)
    set(${out} "v${first}" PARENT_SCOPE)
  else()
    set(${out} "v${first}-v${last}" PARENT_SCOPE)
  endif()
endfunction()

# "ABI 34 for v37-v43, v44, v45-v56; ..." for the messages.
function(uroce_known_layouts out)
  set(text "")
  set(previous "")
  foreach(row IN LISTS UROCE_LAYOUTS)
    string(REPLACE " " ";" row "${row}")
    list(GET row 0 abi)
    list(GET row 1 first)
    list(GET row 2 end)
    uroce_release_range(${first} ${end} range)
    if(abi STREQUAL previous)
      string(APPEND text ", ${range}")
    else()
      if(text)
        string(APPEND text "; ")
      endif()
      string(APPEND text "ABI ${abi} for ${range}")
    endif()
    set(previous ${abi})
  endforeach()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

function(uroce_unknown_layout)
  string(JOIN "" why ${ARGV})
  uroce_known_layouts(known)
  message(FATAL_ERROR
    "${why} uroce knows these libibverbs layouts: ${known}. To add one, declare what "
    "that release changed in its libibverbs/driver.h and verbs.h (verbs_context_ops, "
    "ibv_qp_ex, verbs_context) in emulator/protocol/driver_abi.h, with its static_asserts, "
    "and add its row to UROCE_LAYOUTS in provider/rdma_core_releases.cmake (included by "
    "the top CMakeLists.txt); or install libibverbs-dev of a release above.")
endfunction()

# The release: libibverbs' pkg-config version is 1.<api>.<release>.<minor>.
list(GET IBVERBS_LINK_LIBRARIES 0 uroce_ibverbs_library)
if(NOT IBVERBS_VERSION MATCHES "^1\\.[0-9]+\\.([0-9]+)\\.")
  uroce_unknown_layout(
    "The installed libibverbs (${uroce_ibverbs_library}) has the version ${IBVERBS_VERSION}, "
    "not rdma-core's 1.<api>.<release>.<minor>, so its release is unknown.")
endif()
set(UROCE_RDMA_CORE_RELEASE ${CMAKE_MATCH_1})
set(uroce_found "The installed libibverbs (${IBVERBS_VERSION}, ${uroce_ibverbs_library}) is rdma-core v${UROCE_RDMA_CORE_RELEASE}")

# The private ABI, from the symbols it exports.
execute_process(COMMAND ${CMAKE_NM} -D --defined-only ${uroce_ibverbs_library}
                OUTPUT_VARIABLE uroce_ibverbs_symbols RESULT_VARIABLE uroce_nm_status)
if(NOT uroce_nm_status EQUAL 0)
  message(FATAL_ERROR "Cannot read the symbols of ${uroce_ibverbs_library} with ${CMAKE_NM}.")
endif()
if(NOT uroce_ibverbs_symbols MATCHES "verbs_register_driver_([0-9]+)@@?IBVERBS_PRIVATE_")
  uroce_unknown_layout("${uroce_found} but exports no verbs_register_driver_<N>.")
endif()
set(UROCE_PABI ${CMAKE_MATCH_1})
string(APPEND uroce_found " and exports verbs_register_driver_${UROCE_PABI}")

if(UROCE_RDMA_CORE_RELEASE LESS UROCE_RDMA_CORE_FLOOR)
  message(FATAL_ERROR
    "${uroce_found}. uroce needs rdma-core v${UROCE_RDMA_CORE_FLOOR} or later: its provider "
    "reports refused verbs through __verbs_log, which libibverbs exports from v37 "
    "(Ubuntu 22.04 has v39, Debian 12 v44). Install libibverbs-dev of a later release, or "
    "point PKG_CONFIG_PATH at one.")
endif()
if(NOT uroce_ibverbs_symbols MATCHES "__verbs_log@@?IBVERBS_PRIVATE_${UROCE_PABI}")
  message(FATAL_ERROR "${uroce_found} but not __verbs_log, which every release from v37 exports.")
endif()

set(UROCE_RDMA_CORE_FIRST "")
foreach(row IN LISTS UROCE_LAYOUTS)
  string(REPLACE " " ";" row "${row}")
  list(GET row 0 abi)
  list(GET row 1 first)
  list(GET row 2 end)
  if(abi EQUAL UROCE_PABI AND NOT UROCE_RDMA_CORE_RELEASE LESS first
     AND UROCE_RDMA_CORE_RELEASE LESS end)
    set(UROCE_RDMA_CORE_FIRST ${first})
    set(UROCE_RDMA_CORE_END ${end})
    list(GET row 3 UROCE_OPS_LAYOUT)
    list(GET row 4 UROCE_QP_EX_LAYOUT)
  endif()
endforeach()
if(NOT UROCE_RDMA_CORE_FIRST)
  uroce_unknown_layout("${uroce_found}, a pairing uroce has no layout for.")
endif()

# The installed headers must agree with the row: they are what the
# provider is compiled against.
include(CheckSymbolExists)
include(CheckCSourceCompiles)
set(CMAKE_REQUIRED_INCLUDES ${IBVERBS_INCLUDE_DIRS})
set(CMAKE_REQUIRED_LIBRARIES ${IBVERBS_LINK_LIBRARIES})
set(CMAKE_REQUIRED_QUIET ON)
check_symbol_exists(ibv_query_port_speed "infiniband/verbs.h" UROCE_HAVE_QUERY_PORT_SPEED)
foreach(member wr_atomic_write wr_flush)
  check_c_source_compiles("
    #include <stddef.h>
    #include <infiniband/verbs.h>
    int main(void) { return (int)offsetof(struct ibv_qp_ex, ${member}); }" UROCE_HAVE_QP_EX_${member})
endforeach()
check_c_source_compiles("
  #include <infiniband/verbs.h>
  int main(void) { return IBV_WR_ATOMIC_WRITE + IBV_WC_ATOMIC_WRITE + (int)IBV_QP_EX_WITH_ATOMIC_WRITE; }"
  UROCE_HAVE_ATOMIC_WRITE_ENUMS)
unset(CMAKE_REQUIRED_QUIET)
unset(CMAKE_REQUIRED_LIBRARIES)
unset(CMAKE_REQUIRED_INCLUDES)
if(UROCE_HAVE_QP_EX_wr_flush)
  set(uroce_headers_qp_ex 45)
elseif(UROCE_HAVE_QP_EX_wr_atomic_write)
  set(uroce_headers_qp_ex 44)
else()
  set(uroce_headers_qp_ex 36)
endif()
if(UROCE_HAVE_QUERY_PORT_SPEED)
  set(uroce_headers_v62_ops TRUE)
  set(uroce_port_speed "with")
else()
  set(uroce_headers_v62_ops FALSE)
  set(uroce_port_speed "without")
endif()
if(UROCE_OPS_LAYOUT GREATER_EQUAL 62)
  set(uroce_row_v62_ops TRUE)
else()
  set(uroce_row_v62_ops FALSE)
endif()
if(NOT uroce_headers_qp_ex EQUAL UROCE_QP_EX_LAYOUT OR
   NOT uroce_headers_v62_ops STREQUAL uroce_row_v62_ops)
  uroce_unknown_layout(
    "${uroce_found}, but its verbs.h (in ${IBVERBS_INCLUDE_DIRS}) has the ibv_qp_ex of "
    "v${uroce_headers_qp_ex}, ${uroce_port_speed} ibv_query_port_speed, which is not the layout "
    "uroce knows of v${UROCE_RDMA_CORE_RELEASE} (headers of another release?).")
endif()
# IBA 1.5's atomic write came with v44's ibv_qp_ex member.
if(UROCE_HAVE_QP_EX_wr_atomic_write AND UROCE_HAVE_ATOMIC_WRITE_ENUMS)
  set(UROCE_HAVE_ATOMIC_WRITE 1)
else()
  set(UROCE_HAVE_ATOMIC_WRITE 0)
endif()
uroce_release_range(${UROCE_RDMA_CORE_FIRST} ${UROCE_RDMA_CORE_END} uroce_range)
message(STATUS "rdma-core v${UROCE_RDMA_CORE_RELEASE}: provider ABI ${UROCE_PABI}, "
               "verbs_context_ops of v${UROCE_OPS_LAYOUT}, ibv_qp_ex of v${UROCE_QP_EX_LAYOUT}: "
               "the layout of ${uroce_range}")
