# make demo | make test: each sets up everything from a clean clone.
#
# TensorFlow line: TF=2.21 (the default: the current release, no tf.estimator) or TF=2.15 (the
# last with tf.estimator), e.g. `make test TF=2.15`. Each has its own venv (.venv-tf2.21,
# .venv-tf2.15; .venv points at the last one built), made with the newest Python on this machine
# that the line supports (PYTHON=... to choose one).
TF ?= 2.21
SUPPORTED_TF := 2.15 2.21
PYTHONS_2.15 := python3.11 python3.10 python3
PYTHONS_2.21 := python3.13 python3.12 python3.11 python3
RANGE_2.15 := (3, 10), (3, 11)
RANGE_2.21 := (3, 11), (3, 13)   # TF 2.21 supports 3.10, its NumPy 2.4 pin does not
ifeq ($(filter $(TF),$(SUPPORTED_TF)),)
$(error TF=$(TF) is not a supported TensorFlow line: choose TF=2.21 (the default) or TF=2.15)
endif
# The first candidate that runs, is in the line's range and has venv (a pyenv shim of a version
# not selected does not run).
PYTHON  ?= $(shell for p in $(PYTHONS_$(TF)); do $$p -c 'import sys, venv, ensurepip; lo, hi = $(RANGE_$(TF)); \
             sys.exit(not lo <= sys.version_info[:2] <= hi)' >/dev/null 2>&1 && { echo $$p; break; }; done)
VENV    := .venv-tf$(TF)
PY      := $(VENV)/bin/python
SO      := tfps/_tfps_ops.so
CXX     ?= g++
CC_SRCS := $(wildcard kernels/core/*.cc)
CC_TESTS := $(wildcard tests/cc/*.cc)
CC_BIN  := build/cc
# -g1: line tables for the sanitizers' reports (file:line), without the full debug info (20% of the build)
CC_FLAGS = -std=c++17 -I. -Wall -Wextra -Werror -g1 -O1 -pthread
export TF_CPP_MIN_LOG_LEVEL ?= 2
# Python caches tfps's own compiled modules (__pycache__/, ignored by git) even where the
# environment says not to: every process of the suite imports them (0.2 s of CPU each, uncached).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-compat build setup deps cc-build cc-test py-test bench bench-clean-tree bench-smoke bench-lines bench-line bench-torchrec clean

# The demo model on a local cluster: 2 PS, a chief and a worker, one process each (gRPC on loopback).
demo: build
	$(PY) -m tfps.cli launch --config configs/demo.yaml --ps 2 --workers 2

# The venv and the op library are built beside the two sanitizer builds and their runs (pip
# leaves a core idle); pytest then has both cores (its workers saturate them: the sanitizer runs,
# a core and a half for a minute, beside it made pytest that much longer, and the total no shorter).
test: deps
	$(MAKE) -j2 build cc-test
	$(MAKE) py-test

# System packages: oneTBB (headers and library) and GoogleTest (the C++ tests' framework).
deps:
	@missing=""; \
	[ -f /usr/include/oneapi/tbb.h ] || missing="$$missing libtbb-dev"; \
	[ -f /usr/include/gtest/gtest.h ] || missing="$$missing libgtest-dev"; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

# --no-compile: pip byte-compiles every module of every package it installs (three quarters of the
# venv's minute, mostly TensorFlow's); Python compiles the modules a process imports, once, instead.
$(VENV)/.installed: requirements/tf-$(TF).txt requirements/serving-$(TF).txt requirements/common.txt | deps
	@if [ -z "$(PYTHON)" ]; then echo "no Python for TensorFlow $(TF) on this machine: install one of" \
	  "$(PYTHONS_$(TF)) with its venv module (Debian: apt-get install python3-venv), or name one: PYTHON=..."; exit 1; fi
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -r requirements/tf-$(TF).txt
	$(PY) -m pip install -q --no-compile --no-deps -r requirements/serving-$(TF).txt
	$(PY) -m pip install -q --no-compile --no-deps --no-build-isolation -e .
	touch $@

setup: deps $(VENV)/.installed
	@if [ -d .venv ] && [ ! -L .venv ]; then echo "note: .venv is a directory of its own (from before the TF lines): make uses $(VENV)"; \
	else ln -sfn $(VENV) .venv; fi

# build/.tf-<line> names the line the in-tree op library is built for: switching lines relinks it
# (setup.py keeps each line's objects).
build/.tf-$(TF):
	@mkdir -p build && rm -f build/.tf-* && touch $@

$(SO): $(VENV)/.installed build/.tf-$(TF) setup.py $(wildcard ops/*.cc kernels/*.cc kernels/*.h kernels/core/*.cc kernels/core/*.h bindings/*.cc)
	$(PY) setup.py -q build_ops

build: setup $(SO)

# C++ core: unit and 2-thread stress tests, once under ASan+UBSan, once under TSan.
CC_ALL := $(CC_SRCS) $(wildcard kernels/core/*.h tests/cc/*.cc tests/cc/*.h)
SAN_asan := -fsanitize=address,undefined -fno-sanitize-recover=all
SAN_tsan := -fsanitize=thread -DTFPS_STD_THREAD_FORK_JOIN
# The system headers these sources include, precompiled once per sanitizer build and included
# in every source (-Winvalid-pch: one g++ cannot use is an error): parsing them again in each of
# the 32 sources was half of a build's CPU. (The op library compiles kernels/core without it.)
$(CC_BIN)/%/system.h: $(CC_ALL) | deps
	@mkdir -p $(@D)
	@cat $(CC_ALL) | grep -h '^#include <' | sort -u > $@.tmp && mv $@.tmp $@
.PRECIOUS: $(CC_BIN)/%/system.h $(CC_BIN)/%/system.h.gch
$(CC_BIN)/%/system.h.gch: $(CC_BIN)/%/system.h
	$(CXX) $(CC_FLAGS) $(SAN_$*) -x c++-header $< -o $@
$(CC_BIN)/core_%: $(CC_BIN)/%/system.h.gch $(CC_ALL) | deps
	$(CXX) $(CC_FLAGS) $(SAN_$*) -include $(CC_BIN)/$*/system.h -Winvalid-pch $(CC_SRCS) $(CC_TESTS) -o $@ \
	  -lgtest_main -lgtest -ltbb
$(CC_BIN)/bench_%: $(CC_SRCS) $(wildcard kernels/core/*.h) benchmarks/bench_%.cc | deps
	@mkdir -p $(CC_BIN)
	$(CXX) -std=c++17 -I. -O3 -DNDEBUG -march=x86-64-v2 -fno-math-errno -fno-semantic-interposition -pthread $(CC_SRCS) benchmarks/bench_$*.cc -o $@ -ltbb

# The two sanitizer builds are single g++ runs: built side by side, one per core.
cc-build: | deps
	$(MAKE) -j$$(nproc) $(CC_BIN)/core_asan $(CC_BIN)/core_tsan

# Each run's log (GoogleTest's: every test and its time) is in build/cc/; its summary lines are
# printed, the whole log when it fails.
GTEST_SUMMARY = grep -E '^\[ +(PASSED|SKIPPED|FAILED) +\] [0-9]+ test' $(1) | sed 's/, listed below://; s/  */ /g' \
  | paste -sd' ' -
cc-test: cc-build
	@ASAN_OPTIONS=detect_leaks=1 $(CC_BIN)/core_asan > $(CC_BIN)/asan.log 2>&1 \
	  && echo "C++ core under ASan+UBSan: $$($(call GTEST_SUMMARY,$(CC_BIN)/asan.log)) (build/cc/asan.log)" \
	  || { cat $(CC_BIN)/asan.log; exit 1; }
	@TSAN_OPTIONS=halt_on_error=1 $(CC_BIN)/core_tsan > $(CC_BIN)/tsan.log 2>&1 \
	  && echo "C++ core under TSan: $$($(call GTEST_SUMMARY,$(CC_BIN)/tsan.log)) (build/cc/tsan.log)" \
	  || { cat $(CC_BIN)/tsan.log; exit 1; }

# One pytest worker more than cores: the cluster tests wait on peers and restarts, and a third
# worker fills those waits. Tests sharing an expensive module fixture are one xdist_group.
# A test during which TensorFlow warns that an op was changed after a session ran it ("This
# mutation will have no effect") fails: the test processes and docs blocks log C++ warnings for it
# (tests/conftest.py, test_docs.py), whatever TF_CPP_MIN_LOG_LEVEL says.
PYTEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
py-test: build
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --durations=25 tests

# The other TensorFlow line's share in CI (`make test-compat TF=2.15` after `make test`): the
# Estimator tests, the cluster resume tests and a train -> export -> serve flow (marker compat).
test-compat: build
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup -m "estimator or compat" tests

# Each benchmark's shortest run, checked (CI runs it after make test).
bench-smoke: build
	$(PY) -m pytest -q -p no:cacheprovider benchmarks/smoke

# Figures come from committed code: a tree with uncommitted changes is refused in one line.
bench-clean-tree:
	@python3 benchmarks/record.py --check

# Every benchmark, each recorded (benchmarks/record.py: its output, dated, in benchmarks/results/),
# then docs/benchmarks.md written from the results. Run it on a quiet machine.
REC := $(PY) benchmarks/record.py
bench: bench-clean-tree build $(CC_BIN)/bench_index $(CC_BIN)/bench_unique_paths $(CC_BIN)/bench_op_mix $(CC_BIN)/bench_floor
	$(PY) -m pip install -q -r benchmarks/requirements.txt
	$(REC) bench_index -- $(CC_BIN)/bench_index
	$(REC) bench_unique_paths -- $(CC_BIN)/bench_unique_paths
	$(REC) bench_op_mix -- $(CC_BIN)/bench_op_mix
	$(REC) bench_floor -- $(CC_BIN)/bench_floor --keys 1e6,1e7,1e8
	$(REC) bench_table -- $(PY) benchmarks/bench_table.py
	$(REC) bench_unique_partition -- $(PY) benchmarks/bench_unique_partition.py
	$(REC) bench_step -- $(PY) benchmarks/bench_step.py
	$(REC) bench_merge -- $(PY) benchmarks/bench_merge.py
	$(REC) bench_online -- $(PY) benchmarks/bench_online.py
	$(REC) bench_memory -- $(PY) benchmarks/bench_memory.py
	$(REC) bench_checkpoint -- $(PY) benchmarks/bench_checkpoint.py
	$(REC) bench_checkpoint_ps -- $(PY) benchmarks/bench_checkpoint.py --ps 1,2,4
	$(REC) bench_placement -- $(PY) benchmarks/bench_placement.py
	$(REC) bench_cluster -- $(PY) benchmarks/bench_cluster.py
	$(REC) bench_pipeline -- $(PY) benchmarks/bench_pipeline.py
	$(REC) bench_cluster_batch -- $(PY) benchmarks/bench_cluster_batch.py
	$(REC) bench_stock_step -- $(PY) benchmarks/bench_stock_step.py
	$(REC) bench_readers -- $(PY) benchmarks/bench_readers.py
	$(REC) bench_serving -- $(PY) benchmarks/bench_serving.py
	$(REC) bench_export -- $(PY) benchmarks/bench_export.py
	$(REC) bench_mtgr -- $(PY) benchmarks/bench_mtgr.py
	$(REC) bench_scaling -- $(PY) benchmarks/bench_scaling.py --prefetch-modes
	$(REC) bench_quality -- $(PY) benchmarks/bench_quality.py --repeats 5
	$(REC) scaling_model -- $(PY) benchmarks/scaling_model.py
	$(PY) benchmarks/report.py

# The peer benchmark against TorchRec on CPU, recorded like the others (benchmarks/results/bench_torchrec.json)
# but in neither `make bench` nor `make test`: the TorchRec side runs in a venv of its own, .venv-torchrec
# (Python 3.11; torch is the CUDA wheel, about 5.5 GB with its nvidia dependencies, since `import torch`
# needs libcudnn). torchrec goes in --no-deps: it names the CUDA fbgemm-gpu, fbgemm-gpu-cpu stands in.
TORCHREC_PYTHON ?= python3.11
TORCHREC_VENV := .venv-torchrec
TORCHREC := torchrec==1.9.2
$(TORCHREC_VENV)/.installed: benchmarks/requirements-torchrec.txt
	$(TORCHREC_PYTHON) -m venv $(TORCHREC_VENV)
	$(TORCHREC_VENV)/bin/python -m pip install -q --upgrade pip
	$(TORCHREC_VENV)/bin/python -m pip install -q --no-compile -r benchmarks/requirements-torchrec.txt
	$(TORCHREC_VENV)/bin/python -m pip install -q --no-compile --no-deps $(TORCHREC)
	touch $@

bench-torchrec: bench-clean-tree build $(TORCHREC_VENV)/.installed
	$(REC) bench_torchrec -- $(PY) benchmarks/bench_torchrec.py --torchrec-python $(TORCHREC_VENV)/bin/python

# The figures of issue 25 on both TensorFlow lines, one after the other on the same machine:
# bench_table, bench_step, bench_cluster and the demo (`make demo`'s job) under each line's venv,
# kept in benchmarks/results/tf-<line>/; report.py sets them side by side in docs/benchmarks.md.
# Each line's op library is linked in turn (build/.tf-<line>); the default line's is linked last.
bench-lines:
	$(MAKE) bench-line TF=2.15
	$(MAKE) bench-line TF=2.21
	$(MAKE) build TF=$(TF)
	$(PY) benchmarks/report.py

bench-line: build
	$(REC) tf-$(TF)/bench_table -- $(PY) benchmarks/bench_table.py
	$(REC) tf-$(TF)/bench_step -- $(PY) benchmarks/bench_step.py
	$(REC) tf-$(TF)/bench_cluster -- $(PY) benchmarks/bench_cluster.py
	$(REC) tf-$(TF)/demo -- $(PY) -m tfps.cli launch --config configs/demo.yaml --ps 2 --workers 2

clean:
	rm -rf build $(SO) tfps/_core*.so tfps/_build_info.json
