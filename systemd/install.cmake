# SPDX-License-Identifier: Apache-2.0
# Run by `cmake --install` (systemd/CMakeLists.txt): writes the unit with
# the paths of this install and installs it, and installs the configuration
# unless one is already in place. CMAKE_INSTALL_PREFIX is the prefix the
# install uses (--prefix, or the configured one); DESTDIR, when set, is
# prepended by file(INSTALL) but never written into the unit.

# An install directory made absolute against the install prefix.
function(loaderd_full out dir)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  else()
    set(${out} "${CMAKE_INSTALL_PREFIX}/${dir}" PARENT_SCOPE)
  endif()
endfunction()

# A path as one word of a systemd command line: quoted where it has to be.
function(loaderd_unit_word out path)
  if(path MATCHES "[ \t\"'\\\\%$;]")
    message(FATAL_ERROR "loaderd: ${path}: the unit cannot name a path with spaces, quotes, "
                        "backslashes, '%', '$' or ';': choose another install prefix")
  endif()
  set(${out} "${path}" PARENT_SCOPE)
endfunction()

loaderd_full(loaderd_bindir "${LOADERD_BINDIR}")
if(IS_ABSOLUTE "${LOADERD_SYSCONFDIR}")
  set(loaderd_confdir "${LOADERD_SYSCONFDIR}/loaderd")
elseif(CMAKE_INSTALL_PREFIX STREQUAL "/usr" AND LOADERD_SYSCONFDIR STREQUAL "etc")
  set(loaderd_confdir "/etc/loaderd")
else()
  set(loaderd_confdir "${CMAKE_INSTALL_PREFIX}/${LOADERD_SYSCONFDIR}/loaderd")
endif()
loaderd_full(loaderd_unitdir "${LOADERD_UNIT_DIR}")

loaderd_unit_word(exe "${loaderd_bindir}/loaderd")
loaderd_unit_word(config "${loaderd_confdir}/loaderd.conf")
set(LOADERD_UNIT_EXEC_START "${exe} --config ${config}")
loaderd_unit_word(ctl "${loaderd_bindir}/loaderctl")
set(LOADERD_UNIT_EXEC_RELOAD "${ctl} reload")
# Written in a directory of its own for each destination: installs of one
# build tree to several prefixes may run at once (the tests do).
string(MD5 stage "$ENV{DESTDIR}|${CMAKE_INSTALL_PREFIX}")
configure_file("${LOADERD_UNIT_TEMPLATE}" "${LOADERD_STAGE_DIR}/${stage}/loaderd.service" @ONLY)
file(INSTALL "${LOADERD_STAGE_DIR}/${stage}/loaderd.service" DESTINATION "${loaderd_unitdir}")

if(EXISTS "$ENV{DESTDIR}${loaderd_confdir}/loaderd.conf")
  message(STATUS "Keeping: $ENV{DESTDIR}${loaderd_confdir}/loaderd.conf (the example is "
                 "in the documentation directory)")
else()
  file(INSTALL "${LOADERD_CONFIG_EXAMPLE}" DESTINATION "${loaderd_confdir}"
       PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
endif()
