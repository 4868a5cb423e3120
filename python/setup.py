"""Build and install crescent's Python packages (crescent, mooncake) offline.

    /usr/bin/python3 -m pip install --no-build-isolation .      (from python/)

The C library is built with the project's own CMake files (CMake and the
library's -dev packages from scripts/install-deps.sh are needed; no network):
build_ext configures the repository one level up (or $CRESCENT_SOURCE_DIR)
in a private build directory with tests and these bindings turned off,
builds crescent_static (libcrescent as an archive), crescent-master, crescent-metadata-server and
crescent-client, links the extension (python/src/*.c) against libcrescent_static.a, and installs the
servers as crescent/bin/* so that the mooncake_master, mooncake_http_metadata_server and
mooncake_client console commands find them.
"""

import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.environ.get("CRESCENT_SOURCE_DIR") or os.path.join(HERE, ".."))
PKG_CONFIG_DEPS = ["msgpack", "libcurl", "libcrypto", "jansson", "hiredis", "liburing",
                   "libxxhash"]  # what libcrescent links
TOOLS = {"crescent-master": "tools/master", "crescent-metadata-server": "tools/metadata-server",
         "crescent-client": "tools/client"}


def _run(cmd):
    print("+ " + " ".join(cmd), flush=True)
    subprocess.check_call(cmd)


def _pkg_config_libs():
    try:
        out = subprocess.check_output(["pkg-config", "--libs"] + PKG_CONFIG_DEPS, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"pkg-config could not find {PKG_CONFIG_DEPS}: {e} "
                 "(run scripts/install-deps.sh)")
    return out.split()


class CMakeBuildExt(build_ext):
    """Build the C library with CMake, then the extension against it."""

    def run(self):
        if not os.path.exists(os.path.join(ROOT, "include", "crescent", "store.h")):
            sys.exit(f"crescent sources not found at {ROOT}; set CRESCENT_SOURCE_DIR")
        cmake_dir = os.path.abspath(os.path.join(self.build_temp, "crescent-cmake"))
        os.makedirs(cmake_dir, exist_ok=True)
        _run(["cmake", "-S", ROOT, "-B", cmake_dir, "-DCMAKE_BUILD_TYPE=Release",
              "-DCRESCENT_TESTS=OFF", "-DCRESCENT_PYTHON=OFF", "-DCRESCENT_FUZZ=OFF"])
        jobs = str(max(1, os.cpu_count() or 1))
        _run(["cmake", "--build", cmake_dir, "-j", jobs, "--target", "crescent_static"] +
             list(TOOLS))
        libs = _pkg_config_libs()
        for ext in self.extensions:
            ext.include_dirs.append(os.path.join(ROOT, "include"))
            ext.extra_objects.append(os.path.join(cmake_dir, "libcrescent_static.a"))
            ext.extra_link_args.extend(libs + ["-lpthread", "-Wl,--exclude-libs,ALL"])
        super().run()
        # Ship the servers inside the package (crescent/bin/).
        if self.inplace:
            pkg_dir = os.path.join(HERE, "crescent")
        else:
            pkg_dir = os.path.join(os.path.abspath(self.build_lib), "crescent")
        bin_dir = os.path.join(pkg_dir, "bin")
        os.makedirs(bin_dir, exist_ok=True)
        for name, sub in TOOLS.items():
            dst = os.path.join(bin_dir, name)
            shutil.copy2(os.path.join(cmake_dir, sub, name), dst)
            os.chmod(dst, 0o755)


ext = Extension(
    "crescent._crescent",
    sources=[os.path.join("src", f)
             for f in ("module.c", "convert.c", "engine.c", "store.c", "store_compat.c",
                       "store_thin.c", "common.c")],
    extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-fvisibility=hidden"],
)

setup(
    name="crescent",
    version="0.1.0",
    description="crescent KV-cache transfer engine and store, with a drop-in mooncake package",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=["crescent", "mooncake"],
    package_data={"crescent": ["*.pyi", "py.typed", "bin/*"], "mooncake": ["py.typed"]},
    ext_modules=[ext],
    cmdclass={"build_ext": CMakeBuildExt},
    entry_points={"console_scripts": [
        "mooncake_master=mooncake.cli:master",
        "mooncake_http_metadata_server=mooncake.cli:metadata_server",
        "mooncake_client=mooncake.cli:client",
        "transfer_engine_bench=mooncake.te_bench:main",
        "mc_store_rest_server=mooncake.mooncake_store_service:sync_main",
        "transfer_engine_topology_dump=mooncake.transfer_engine_topology_dump:main",
    ]},
    python_requires=">=3.8",
    zip_safe=False,
)
