# SPDX-License-Identifier: Apache-2.0
# A Debian package of what `cmake --install` puts, with the prefix /usr:
#
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j
#   cpack --config build/CPackConfig.cmake -B build/deb   # build/deb/loaderd_VERSION_ARCH.deb
#
# The install runs with DESTDIR (CPACK_SET_DESTDIR), so the unit written at
# install time (systemd/install.cmake) names /usr/bin/loaderd and
# /etc/loaderd/loaderd.conf, the configuration's place for the prefix /usr.
# The dependencies are what dpkg-shlibdeps finds the programs and the
# client library linked against (libuv1, liburing2, libinih1,
# libjpeg62-turbo, libpng16-16, zlib1g, libjansson4, libmicrohttpd12, libc6;
# fewer with LOADERD_STATIC_DEPS). The configuration is a conffile; postinst creates
# the user and reloads systemd; the service is not enabled.
set(LOADERD_DEB_MAINTAINER "loaderd maintainers <loaderd@localhost>" CACHE STRING
    "Maintainer field of the Debian package")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME loaderd)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "node-level data-loading daemon for GPU training")
set(CPACK_PACKAGE_DESCRIPTION "loaderd reads and decodes training samples (records, tokens, JPEGs)
in worker processes into one shared-memory arena and hands them to the
training processes of the machine as named tensors, in shared memory or
on their GPU. Includes the daemon, its worker, loaderctl, the C client
library and the Python package.")
set(CPACK_PACKAGE_CONTACT "${LOADERD_DEB_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${LOADERD_DEB_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_PREFIX /usr) # the install prefix, with CPACK_SET_DESTDIR
set(CPACK_SET_DESTDIR ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/packaging/postinst
    ${PROJECT_SOURCE_DIR}/packaging/postrm ${PROJECT_SOURCE_DIR}/packaging/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
