"""Builds tfps and its one custom-op library, tfps/_tfps_ops.so.

`python setup.py build_ops` compiles ops/*.cc and kernels/**/*.cc with the flags
TensorFlow reports (tf.sysconfig), -O3, and links the system oneTBB (-ltbb); then
tfps/_core (bindings/core_module.cc + kernels/core/*.cc, pybind11, no TensorFlow).
This file owns the flags of the op library; BUILD mirrors it, and the Makefile adds only
the sanitizer flags of the C++ tests of the TF-free core.
"""
import concurrent.futures
import glob
import json
import os
import subprocess
import sys
import sysconfig

from setuptools import Command, Distribution, find_packages, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(ROOT, "tfps", "_tfps_ops.so")
BUILD_INFO = os.path.join(ROOT, "tfps", "_build_info.json")
OBJ_DIR = os.path.join(ROOT, "build", "obj")

CORE_FLAGS = ["-std=c++17", "-fPIC", "-I" + ROOT, "-Wall", "-Wextra"]
OPT_FLAGS = ["-O3", "-DNDEBUG", "-march=x86-64-v2", "-fno-math-errno",   # no errno: sqrt loops vectorize
             "-fno-semantic-interposition"]   # calls within the library inline (no PLT)
TBB_LINK = ["-ltbb"]


def sources():
    return sorted(glob.glob(os.path.join(ROOT, "ops", "*.cc")) +
                  glob.glob(os.path.join(ROOT, "kernels", "**", "*.cc"), recursive=True))


def tf_flags():
    import tensorflow as tf
    # TF's headers go in as system headers so -Wall -Wextra speak only of ours.
    compile_flags = ["-isystem" + f[2:] if f.startswith("-I") else f for f in tf.sysconfig.get_compile_flags()]
    return compile_flags, tf.sysconfig.get_link_flags(), tf.__version__


def _compile(args):
    src, obj, flags = args
    os.makedirs(os.path.dirname(obj), exist_ok=True)
    deps = [src] + glob.glob(os.path.join(ROOT, "kernels", "**", "*.h"), recursive=True)
    if os.path.exists(obj) and os.path.getmtime(obj) >= max(os.path.getmtime(d) for d in deps):
        return obj
    cmd = ["g++", "-c", src, "-o", obj] + flags
    subprocess.run(cmd, check=True)
    return obj


def build_core(jobs=2):
    """tfps/_core<EXT_SUFFIX>: the pybind11 binding of the TF-free core."""
    import pybind11
    flags = CORE_FLAGS + OPT_FLAGS + ["-fvisibility=hidden", "-isystem" + pybind11.get_include(),
                                      "-isystem" + sysconfig.get_paths()["include"]]
    srcs = [os.path.join(ROOT, "bindings", "core_module.cc")] + glob.glob(os.path.join(ROOT, "kernels", "core", "*.cc"))
    work = [(s, os.path.join(OBJ_DIR, "core_py", os.path.relpath(s, ROOT)[:-3] + ".o"), flags) for s in sorted(srcs)]
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        objs = list(pool.map(_compile, work))
    out = os.path.join(ROOT, "tfps", "_core" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run(["g++", "-shared", "-o", out] + objs + TBB_LINK + ["-O3"], check=True)


def build_ops(jobs=2):
    compile_flags, link_flags, version = tf_flags()
    flags = CORE_FLAGS + OPT_FLAGS + compile_flags
    work = [(s, os.path.join(OBJ_DIR, os.path.relpath(s, ROOT)[:-3] + ".o"), flags) for s in sources()]
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        objs = list(pool.map(_compile, work))
    subprocess.run(["g++", "-shared", "-o", OUT] + objs + link_flags + TBB_LINK + ["-O3"], check=True)
    with open(BUILD_INFO, "w") as f:
        json.dump({"tensorflow": version, "python": sys.version.split()[0]}, f)
    build_core(jobs)
    print("built", os.path.relpath(OUT, ROOT), "for TensorFlow", version, "and tfps/_core")


class BuildOps(Command):
    description = "compile tfps/_tfps_ops.so"
    user_options = []

    def initialize_options(self):
        pass

    def finalize_options(self):
        pass

    def run(self):
        build_ops()


class BuildPyWithOps(build_py):
    """build_py that first builds the op library, so `pip install .` and `pip wheel .` ship it
    (with _build_info.json, the TensorFlow version it was built for)."""

    def run(self):
        build_ops()
        super().run()


class BinaryDistribution(Distribution):
    """The wheel holds a compiled library: tag it for this platform and Python, not 'any'."""

    def has_ext_modules(self):
        return True


if __name__ == "__main__":
    setup(
        name="tfps",
        version="0.1.0",
        packages=find_packages(include=["tfps", "tfps.*"]),
        package_data={"tfps": ["_tfps_ops.so", "_core*.so", "_build_info.json"]},
        entry_points={"console_scripts": ["tfps = tfps.cli:main"]},
        python_requires=">=3.11",
        install_requires=["tensorflow-cpu==2.15.1", "tensorflow-estimator==2.15.0", "numpy<2", "pyyaml", "threadpoolctl>=3,<4",
                          "grpcio>=1.59,<2", "Werkzeug>=3,<4"],
        cmdclass={"build_ops": BuildOps, "build_py": BuildPyWithOps},
        distclass=BinaryDistribution,
    )
