# SPDX-License-Identifier: Apache-2.0
"""The wheel is built for the platform it runs on: the package carries
libloaderd_client.so, a shared library of this machine's architecture, so
the wheel is tagged py3-none-<platform> (py3-none-linux_x86_64 on x86-64
Linux), never py3-none-any. Everything else is in pyproject.toml."""

from setuptools import setup
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel  # setuptools >= 70.1
except ImportError:
    from wheel.bdist_wheel import bdist_wheel


class platform_distribution(Distribution):
    """Not pure: the files go where platform-specific ones go (platlib)."""

    def has_ext_modules(self):
        return True


class platform_wheel(bdist_wheel):
    """Of one platform (the library's), but of any Python 3 and no Python
    ABI: the package itself is pure Python over ctypes."""

    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(distclass=platform_distribution, cmdclass={"bdist_wheel": platform_wheel})
