"""`pip install 'tfps[serve]'` leaves one TensorFlow: checked in fresh venvs, outside `make test`.

Run with the venv of a TensorFlow line after `make build` (CI: .ci/run):

    .venv-tf2.21/bin/python .ci/check_install.py

Two installs, each into a fresh venv of this Python:
- wheel:  `pip wheel --no-build-isolation` with this venv, then `pip install 'tfps-….whl[serve]'`;
- source: `pip install '<tree>[serve]'`, an isolated build (pyproject.toml's build requirements).
Each must leave exactly one distribution that installs the `tensorflow` package (by its files,
not by name: tensorflow, tensorflow-cpu, tensorflow-intel ... all ship tensorflow/__init__.py),
that one tensorflow-cpu, and every `==` pin of requirements/tf-<line>.txt; then `import tfps`
with the serving API, a short `tfps train` of the demo, its `tfps export` (stock: its warm-up
requests are TF Serving's protos) and `tfps serve --help` run with TensorFlow's C++ logs at their
default level, succeed and print no CUDA line on stderr (the full `tensorflow` wheel prints `Could
not find cuda drivers` and `failed call to cuInit` on a machine without a GPU).
Builds in a copy of the tree (tracked and untracked files, and build/obj with its times, so objects
already built are not compiled again): a run never writes into the tree.
Prints the distributions and the time of each step; exits 1 when a check fails.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUDA = re.compile(r"cuinit|cuda", re.IGNORECASE)
# Run in each fresh venv: the distributions that install the `tensorflow` package.
PROVIDERS = r"""
import json
from importlib import metadata
print(json.dumps(sorted({d.metadata["Name"] for d in metadata.distributions()
                         if any(str(f) == "tensorflow/__init__.py" for f in d.files or ())})))
"""
# Run in each fresh venv, away from the tree: tfps and the serving API it imports, a real request.
IMPORTS = r"""
import os, sys
import tfps, tfps.serving.grpc_api, tfps.runner.stock_export
import tensorflow as tf
import tensorflow_serving
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
request = predict_pb2.PredictRequest()
request.inputs["x"].CopyFrom(tf.make_tensor_proto([[1.0, 2.0]]))
assert predict_pb2.PredictRequest.FromString(request.SerializeToString()) == request
for module in (tfps, tensorflow_serving):
    assert os.path.realpath(module.__file__).startswith(os.path.realpath(sys.prefix)), module.__file__
print("imports ok:", tf.__version__, prediction_service_pb2_grpc.PredictionServiceServicer.__name__)
"""


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(line):
    """{name: version} of the `==` lines of requirements/tf-<line>.txt."""
    out = {}
    with open(os.path.join(ROOT, "requirements", f"tf-{line}.txt")) as f:
        for text in f:
            text = text.split("#")[0].strip()
            if "==" in text:
                name, version = text.split("==")
                out[normalize(name)] = version.strip()
    return out


def run(cmd, **kwargs):
    out = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if out.returncode != 0:
        sys.stderr.write(out.stdout[-3000:] + out.stderr[-5000:])
        raise SystemExit(f"check_install: failed ({out.returncode}): {' '.join(map(str, cmd))}")
    return out


def copy_tree(dest):
    """The tree's tracked and untracked (not ignored) files, the built libraries and build/obj, with
    their times (the build then compiles only what is out of date, as in the tree)."""
    files = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT).stdout
    built = [f for f in os.listdir(os.path.join(ROOT, "tfps")) if f.endswith(".so") or f == "_build_info.json"]
    for rel in [f for f in files.split("\0") if f] + [os.path.join("tfps", f) for f in built]:
        src = os.path.join(ROOT, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, rel))
    if os.path.isdir(os.path.join(ROOT, "build", "obj")):
        shutil.copytree(os.path.join(ROOT, "build", "obj"), os.path.join(dest, "build", "obj"))


class Checks:
    def __init__(self):
        self.passed, self.failed = 0, 0

    def check(self, ok, what):
        print(f"  {'ok  ' if ok else 'FAIL'} {what}")
        if ok:
            self.passed += 1
        else:
            self.failed += 1


def check_venv(checks, name, venv, spec, want, workdir):
    py = os.path.join(venv, "bin", "python")
    start = time.monotonic()
    run([sys.executable, "-m", "venv", venv])
    run([py, "-m", "pip", "install", "-q", spec], cwd=workdir)
    print(f"\n{name}: pip install {os.path.basename(spec)} ({time.monotonic() - start:.0f} s)")
    listed = {normalize(d["name"]): d["version"] for d in json.loads(
        run([py, "-m", "pip", "list", "--format=json"], cwd=workdir).stdout)}
    shown = sorted(n for n in listed if n.startswith(("tensorflow", "tf-", "keras", "tensorboard"))
                   or n in ("protobuf", "numpy", "ml-dtypes", "grpcio", "werkzeug"))
    print(f"  {len(listed)} distributions; of them: " + ", ".join(f"{n} {listed[n]}" for n in shown))
    providers = [normalize(n) for n in json.loads(run([py, "-c", PROVIDERS], cwd=workdir).stdout)]
    checks.check(providers == ["tensorflow-cpu"],
                 f"one distribution installs the tensorflow package, tensorflow-cpu: {providers}")
    for dist, version in want.items():
        checks.check(listed.get(dist) == version, f"{dist}=={version} (installed: {listed.get(dist)})")
    # TensorFlow's C++ logs at their default level (INFO): a CUDA line would show at any level.
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    tfps = os.path.join(venv, "bin", "tfps")
    model_dir, export_dir = os.path.join(workdir, f"model-{name}"), os.path.join(workdir, f"export-{name}")
    demo = [f"--config={os.path.join(workdir, 'tree', 'configs', 'demo.yaml')}", f"--set=model_dir={model_dir}",
            "--set=train.steps=20", "--set=train.batch_size=256", "--set=eval.examples=4096"]
    for what, cmd in (("python -c <import tfps and the serving API>", [py, "-c", IMPORTS]),
                      ("tfps train (demo, 20 steps)", [tfps, "train", *demo]),
                      ("tfps export (stock, with warm-up requests)", [tfps, "export", *demo,
                                                                      f"--export-dir={export_dir}"]),
                      ("tfps serve --help", [tfps, "serve", "--help"])):
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir, env=env, timeout=600)
        checks.check(out.returncode == 0, f"{what}: exit {out.returncode}"
                     + (f"\n{out.stderr[-2000:]}" if out.returncode else ""))
        cuda = [line for line in out.stderr.splitlines() if CUDA.search(line)]
        checks.check(not cuda, f"{what}: no CUDA line on stderr" + "".join(f"\n      {line}" for line in cuda))
    warmup = [v for v in (os.listdir(export_dir) if os.path.isdir(export_dir) else ())
              if os.path.exists(os.path.join(export_dir, v, "assets.extra", "tf_serving_warmup_requests"))]
    checks.check(len(warmup) == 1, f"the export holds one version with its warm-up requests: {warmup}")

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (venvs, wheel, tree)")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)   # each step as it ends, in CI's log too
    from importlib import metadata
    tf = metadata.version("tensorflow-cpu")
    line = ".".join(tf.split(".")[:2])
    want = pins(line)
    tmp = tempfile.mkdtemp(prefix="tfps-check-install-")
    checks = Checks()
    try:
        start = time.monotonic()
        tree = os.path.join(tmp, "tree")
        copy_tree(tree)
        wheels = os.path.join(tmp, "wheels")
        run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", wheels, tree],
            cwd=tmp)
        (wheel,) = [f for f in os.listdir(wheels) if f.startswith("tfps-")]
        print(f"wheel: {wheel}, built with TensorFlow {tf} ({time.monotonic() - start:.0f} s)")
        check_venv(checks, "wheel", os.path.join(tmp, "venv-wheel"), os.path.join(wheels, wheel) + "[serve]",
                   want, tmp)
        check_venv(checks, "source", os.path.join(tmp, "venv-source"), tree + "[serve]", want, tmp)
        print(f"\n{time.monotonic() - start:.0f} s in all")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"install checks: {checks.passed} passed, {checks.failed} failed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
