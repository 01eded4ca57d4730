"""Builds tfps and its one custom-op library, tfps/_tfps_ops.so.

`python setup.py build_ops` compiles ops/*.cc and kernels/**/*.cc with the flags
TensorFlow reports (tf.sysconfig), -O3, and links the system oneTBB (-ltbb); then
tfps/_core (bindings/core_module.cc + kernels/core/*.cc, pybind11, no TensorFlow).
This file owns the flags of the op library; BUILD mirrors it, and the Makefile adds only
the sanitizer flags of the C++ tests of the TF-free core. A wheel also carries TF Serving's API,
generated from third_party/tensorflow_serving/ (serving_api).
"""
import concurrent.futures
import glob
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

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
# The core's objects serve both libraries: its symbols stay inside each (and the ABI is pinned,
# as TensorFlow's flags pin it for the op library's own objects).
CORE_ONLY_FLAGS = ["-fvisibility=hidden", "-D_GLIBCXX_USE_CXX11_ABI=1"]


def sources():
    """The op library's own sources (the TF-free core is compiled once, core_objects())."""
    return sorted(glob.glob(os.path.join(ROOT, "ops", "*.cc")) + glob.glob(os.path.join(ROOT, "kernels", "*.cc")))


def tf_flags():
    import tensorflow as tf
    # TF's headers go in as system headers so -Wall -Wextra speak only of ours.
    # Real paths: the precompiled header's stamp names them, and a venv reached through a link
    # (.venv -> .venv-tf2.21) must not rebuild it (400 MB, 50 s).
    compile_flags = ["-isystem" + os.path.realpath(f[2:]) if f.startswith("-I") else f
                     for f in tf.sysconfig.get_compile_flags()]
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


def _compile_all(work, jobs):
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(_compile, work))


def _link(objs, out, flags, built_for=None):
    """Links `objs` into `out` unless it is newer than all of them and was built for the same
    `built_for` (the TensorFlow version, read from BUILD_INFO); written aside and renamed into
    place, so a process loading `out` meanwhile (a test, a trainer) never sees half a file."""
    current = built_for is None or _built_for() == built_for
    if current and os.path.exists(out) and os.path.getmtime(out) >= max(os.path.getmtime(o) for o in objs):
        os.utime(out)   # current for make, which also depends on setup.py
        return
    tmp = f"{out}.tmp-{os.getpid()}"
    subprocess.run(["g++", "-shared", "-o", tmp] + objs + flags, check=True)
    os.replace(tmp, out)


def _built_for():
    try:
        with open(BUILD_INFO) as f:
            return json.load(f).get("tensorflow")
    except (OSError, ValueError):
        return None


def core_objects(jobs=2):
    """kernels/core/*.cc, compiled once for both libraries (they include no TensorFlow or Python
    header): hidden symbols, so neither library exports the core."""
    flags = CORE_FLAGS + OPT_FLAGS + CORE_ONLY_FLAGS
    work = [(s, os.path.join(OBJ_DIR, "core", os.path.basename(s)[:-3] + ".o"), flags)
            for s in sorted(glob.glob(os.path.join(ROOT, "kernels", "core", "*.cc")))]
    return _compile_all(work, jobs)


def binding_object():
    """bindings/core_module.cc (pybind11) compiled for this Python."""
    import pybind11
    flags = CORE_FLAGS + OPT_FLAGS + CORE_ONLY_FLAGS + ["-isystem" + pybind11.get_include(),
                                                        "-isystem" + sysconfig.get_paths()["include"]]
    py = f"py{sys.version_info.major}.{sys.version_info.minor}"
    return _compile((os.path.join(ROOT, "bindings", "core_module.cc"), os.path.join(OBJ_DIR, py, "core_module.o"),
                     flags))


def build_core(core, binding):
    """tfps/_core<EXT_SUFFIX>: the pybind11 binding of the TF-free core."""
    _link([binding] + core, os.path.join(ROOT, "tfps", "_core" + sysconfig.get_config_var("EXT_SUFFIX")),
          TBB_LINK + ["-O3"])


# TensorFlow's headers that the op sources include, precompiled once per TensorFlow version
# (build/obj/tf-<version>/pch): parsing them is three quarters of each op source's compile time.
PCH_HEADERS = ["tensorflow/core/framework/op_kernel.h", "tensorflow/core/framework/op.h",
               "tensorflow/core/framework/shape_inference.h", "tensorflow/core/framework/common_shape_fns.h",
               "tensorflow/core/framework/tensor.h", "tensorflow/core/framework/resource_mgr.h"]


def _precompiled_header(obj_dir, flags):
    """Writes and precompiles the header of PCH_HEADERS under obj_dir with `flags` (the op
    sources' own: g++ takes a precompiled header only with the flags it was built with); returns
    the flags that include it (-Winvalid-pch: a header g++ cannot use is said, then parsed)."""
    header = os.path.join(obj_dir, "pch", "tfps_tf.h")
    # The header names what its precompiled form depends on (compiler, flags, the headers'
    # files): when one changes, the header's text does, and the .gch is rebuilt.
    compiler = subprocess.run(["g++", "-dumpfullversion"], capture_output=True, text=True, check=True).stdout.strip()
    found = [os.path.join(f[len("-isystem"):], h) for f in flags if f.startswith("-isystem") for h in PCH_HEADERS]
    stamp = json.dumps({"g++": compiler, "flags": flags,
                        "headers": {p: os.path.getmtime(p) for p in found if os.path.exists(p)}})
    text = f"// {stamp}\n" + "".join(f'#include "{h}"\n' for h in PCH_HEADERS)
    os.makedirs(os.path.dirname(header), exist_ok=True)
    if not os.path.exists(header) or open(header).read() != text:
        with open(f"{header}.tmp-{os.getpid()}", "w") as f:
            f.write(text)
        os.replace(f"{header}.tmp-{os.getpid()}", header)
    gch = header + ".gch"
    if not os.path.exists(gch) or os.path.getmtime(gch) < os.path.getmtime(header):
        tmp = f"{gch}.tmp-{os.getpid()}"   # (two builds at once each write their own)
        subprocess.run(["g++", "-x", "c++-header", header, "-o", tmp] + flags, check=True)
        os.replace(tmp, gch)
    return ["-include", header, "-Winvalid-pch"]


def build_ops(jobs=2):
    compile_flags, link_flags, version = tf_flags()
    flags = CORE_FLAGS + OPT_FLAGS + compile_flags
    # The op objects of each TensorFlow apart: switching TF back and forth relinks, not rebuilds.
    obj_dir = os.path.join(OBJ_DIR, f"tf-{version}")
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        # The precompiled header first, beside the TF-free objects; then the op sources.
        pch = pool.submit(_precompiled_header, obj_dir, flags)
        core = pool.submit(core_objects, 1)
        binding = pool.submit(binding_object)
        work = [(s, os.path.join(obj_dir, os.path.relpath(s, ROOT)[:-3] + ".o"), flags + pch.result())
                for s in sources()]
        objs = list(pool.map(_compile, work))
        core, binding = core.result(), binding.result()
    _link(objs + core, OUT, link_flags + TBB_LINK + ["-O3"], built_for=version)
    info = json.dumps({"tensorflow": version, "python": sys.version.split()[0]})
    if not os.path.exists(BUILD_INFO) or open(BUILD_INFO).read() != info:
        with open(BUILD_INFO + ".tmp", "w") as f:
            f.write(info)
        os.replace(BUILD_INFO + ".tmp", BUILD_INFO)
    build_core(core, binding)
    print("built", os.path.relpath(OUT, ROOT), "for TensorFlow", version, "and tfps/_core")


BUILD_FILE = os.path.join(ROOT, "BUILD")


def render_build():
    """The text of BUILD: Bazel targets with this file's sources and flags (`python setup.py
    build_file` writes it; tests/test_build.py checks that it is current)."""
    q = lambda flags: ", ".join(f'"{f}"' for f in flags)   # noqa: E731
    core = [f for f in CORE_FLAGS if not f.startswith("-I") and f != "-fPIC"]
    return f"""# Generated by `python setup.py build_file` from setup.py, the build of record (`make` drives
# it): same sources, same flags. tests/test_build.py fails when this file is not current.
# Not built in CI (no Bazel on the machines); the map of targets for a Bazel workspace.

cc_library(
    name = "core",
    srcs = glob(["kernels/core/*.cc"]),
    hdrs = glob(["kernels/core/*.h"]),
    copts = [{q(core + OPT_FLAGS + CORE_ONLY_FLAGS)}],
    linkopts = [{q(TBB_LINK)}],
)

cc_binary(
    name = "tfps/_tfps_ops.so",
    srcs = glob(["ops/*.cc", "kernels/*.cc", "kernels/*.h"]),
    copts = [{q(core + OPT_FLAGS)}],
    linkshared = 1,
    deps = [
        ":core",
        "@local_config_tf//:libtensorflow_framework",
        "@local_config_tf//:tf_header_lib",
    ],
)

cc_binary(
    name = "tfps/_core.so",
    srcs = ["bindings/core_module.cc"],
    copts = [{q(core + OPT_FLAGS + CORE_ONLY_FLAGS)}],
    linkshared = 1,
    deps = [":core", "@pybind11"],
)

py_library(
    name = "tfps",
    srcs = glob(["tfps/**/*.py"]),
    data = [":tfps/_tfps_ops.so", ":tfps/_core.so"],
)

cc_test(
    name = "core_test",
    srcs = glob(["tests/cc/*.cc", "tests/cc/*.h"]),
    copts = [{q(core + ["-Werror", "-fsanitize=address,undefined"])}],
    linkopts = ["-fsanitize=address,undefined"],
    deps = [":core", "@com_google_googletest//:gtest_main"],
)

py_test(
    name = "python_tests",
    srcs = glob(["tests/*.py"]),
    main = "tests/run_pytest.py",
    deps = [":tfps"],
)
"""


def _tensorflow():
    """The TensorFlow distribution installed (tensorflow-cpu, or tensorflow where a build uses the
    full one), its version and its line ('2.21')."""
    from importlib import metadata
    try:
        name, version = "tensorflow-cpu", metadata.version("tensorflow-cpu")
    except metadata.PackageNotFoundError:
        name, version = "tensorflow", metadata.version("tensorflow")
    return name, version, ".".join(version.split(".")[:2])


def _pins(path):
    """{name: version} of a requirements file's `name==version` lines."""
    pins = {}
    with open(path) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if "==" in line:
                name, version = line.split("==")
                pins[name.strip()] = version.strip()
    return pins


def _grpcio_tools(line):
    """The grpcio-tools that generates the serving API for the line (requirements/serving-<line>.txt):
    its protoc's code runs on the protobuf the line pins, and its gRPC code needs a grpcio at least
    as new as itself."""
    return _pins(os.path.join(ROOT, "requirements", f"serving-{line}.txt"))["grpcio-tools"]


def install_requires():
    """The wheel's requirements: the TensorFlow it is built with (its op library fits no other;
    tfps.ops refuses another with one line) and the pins requirements/tf-<line>.txt gives beside it
    (NumPy, protobuf, ml_dtypes, tensorflow-estimator on 2.15), so that a resolver cannot pick
    others; grpcio as new as the generated serving API's gRPC code asks (serving_api)."""
    name, version, line = _tensorflow()
    pins = {n: v for n, v in _pins(os.path.join(ROOT, "requirements", f"tf-{line}.txt")).items()
            if n not in ("tensorflow", "tensorflow-cpu")}
    return [f"{name}=={version}", *(f"{n}=={v}" for n, v in pins.items()), "pyyaml", "threadpoolctl>=3,<4",
            f"grpcio>={_grpcio_tools(line)},<2", "Werkzeug>=3,<4"]


def extras_require():
    """`pip install tfps[serve]`: kept for the command users and the docs give, and empty: what
    `tfps serve` imports beyond tfps is in the wheel itself (the serving API, serving_api) or in
    install_requires (grpcio, Werkzeug, protobuf). It named tensorflow-serving-api, whose own
    requirement is the full `tensorflow` distribution: pip installed it beside tensorflow-cpu,
    with protobuf and ml_dtypes past the line's pins."""
    return {"serve": []}


# TF Serving's API protos, the release of requirements/serving-<line>.txt (third_party/tensorflow_serving/README.md).
SERVING_PROTOS = os.path.join(ROOT, "third_party")


def serving_api(out):
    """Writes the `tensorflow_serving` package (apis/, config/) under `out`: the _pb2 modules of TF
    Serving's protos, and _pb2_grpc of those with a service, generated by grpcio-tools' protoc
    against the descriptors of the installed TensorFlow's own protos (tensor.proto, meta_graph.proto,
    ...; the TensorFlow wheel ships their modules, not their .proto files). The modules and file
    names are tensorflow-serving-api's, so messages and stubs are interchangeable with it; that
    distribution itself is no requirement (it requires the full `tensorflow` one). Returns the
    files written."""
    from importlib import metadata
    from google.protobuf import descriptor_pb2
    line = _tensorflow()[2]
    want = _grpcio_tools(line)
    try:
        have = metadata.version("grpcio-tools")
    except metadata.PackageNotFoundError:
        have = None
    if have != want:
        raise SystemExit(f"tfps's serving API is generated with grpcio-tools=={want} (requirements/serving-{line}"
                         f".txt), found {have or 'none'}: pip install --no-deps grpcio-tools=={want}")
    protos = sorted(os.path.relpath(p, SERVING_PROTOS)
                    for p in glob.glob(os.path.join(SERVING_PROTOS, "tensorflow_serving", "*", "*.proto")))
    texts = {p: open(os.path.join(SERVING_PROTOS, p)).read() for p in protos}
    deps = descriptor_pb2.FileDescriptorSet()
    added = set()

    def add(descriptor):   # a file after the files it imports
        if descriptor.name not in added:
            for dependency in descriptor.dependencies:
                add(dependency)
            added.add(descriptor.name)
            deps.file.add().MergeFromString(descriptor.serialized_pb)

    for text in texts.values():
        for name in re.findall(r'^import\s+"([^"]+)\.proto";', text, re.M):
            if not name.startswith("tensorflow_serving/"):
                add(importlib.import_module(name.replace("/", ".") + "_pb2").DESCRIPTOR)
    services = [p for p, text in texts.items() if re.search(r"^service\s", text, re.M)]
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "deps.pb"), "wb") as f:
            f.write(deps.SerializeToString())
        protoc = [sys.executable, "-m", "grpc_tools.protoc", f"--descriptor_set_in={os.path.join(tmp, 'deps.pb')}",
                  f"-I{SERVING_PROTOS}"]
        # protoc in a process of its own: grpcio-tools' and TensorFlow's copies of protobuf's C++
        # in one process crash it.
        subprocess.run(protoc + [f"--python_out={tmp}", *protos], check=True)
        subprocess.run(protoc + [f"--grpc_python_out={tmp}", *services], check=True)
        for package in sorted({os.path.dirname(p) for p in protos} | {"tensorflow_serving"}):
            os.makedirs(os.path.join(out, package), exist_ok=True)
            for f in ["__init__.py"] + sorted(f for f in os.listdir(os.path.join(tmp, package)) if f.endswith(".py")):
                dest = os.path.join(out, package, f)
                if os.path.exists(os.path.join(tmp, package, f)):
                    shutil.copyfile(os.path.join(tmp, package, f), dest)
                else:   # protoc writes no __init__.py
                    open(dest, "w").close()
                written.append(dest)
    return written


class _NoOptions(Command):
    user_options = []

    def initialize_options(self):
        pass

    def finalize_options(self):
        pass


class BuildFile(_NoOptions):
    description = "write BUILD from this file's sources and flags"

    def run(self):
        with open(BUILD_FILE, "w") as f:
            f.write(render_build())


class BuildOps(_NoOptions):
    description = "compile tfps/_tfps_ops.so"

    def run(self):
        build_ops()


class BuildPyWithOps(build_py):
    """build_py that first builds the op library, so `pip install .` and `pip wheel .` ship it
    (with _build_info.json, the TensorFlow version it was built for), and writes the serving API
    (serving_api) beside tfps. Not in an editable install: the dev venv has tensorflow-serving-api
    (make setup, with --no-deps), the same modules."""

    def run(self):
        build_ops()
        super().run()
        self.serving_api = [] if self.editable_mode else serving_api(self.build_lib)

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + getattr(self, "serving_api", [])


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
        python_requires=">=3.10",
        install_requires=install_requires(),
        extras_require=extras_require(),
        cmdclass={"build_ops": BuildOps, "build_py": BuildPyWithOps, "build_file": BuildFile},
        distclass=BinaryDistribution,
    )
