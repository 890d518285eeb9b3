# Two entry points (README): `make run` and `make test`. Both do every set-up step themselves:
# create .venv, install the project, fetch the default model.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test model bench bench-peer check-peer screenshot package dmg clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "TurboSpark needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)

# llama-cpp-python (the engine) comes from PyPI as source and is compiled here, once: about 3-4
# minutes on 2 cores (pip keeps the built wheel in its cache, so later venvs take seconds). Its
# CPU code is pinned to a portable level (a native build of these VMs' AVX-512 dies elsewhere,
# and the other way round), the multimodal library is left out; macOS builds with Metal.
UNAME_S := $(shell uname -s)
UNAME_M := $(shell uname -m)
LLAMA_CMAKE_ARGS ?= -DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF
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

model: $(STAMP)
	$(BIN)/turbospark model fetch

run: $(STAMP) model
	$(BIN)/python -m turbospark_app

test: $(STAMP) model
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest

bench: $(STAMP) model
	$(BIN)/python benchmarks/bench_model.py

# TurboSpark vs llama.cpp side by side (benchmarks/bench_peer.py; not part of `make test`).
# llama-cpp-python 0.3.36 compiles from source into its own venv, once (~7+ min on 2 cores).
# On x86_64 the CPU features are pinned: a native build crashed with an illegal instruction here.
PEER_VENV ?= build/peer-venv
PEER_STAMP := $(PEER_VENV)/.llama-cpp-stamp
ifeq ($(shell uname -m),x86_64)
PEER_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF
endif

$(PEER_STAMP):
	test -x $(PEER_VENV)/bin/python || $(PYTHON) -m venv $(PEER_VENV)
	CMAKE_ARGS="$(PEER_CMAKE_ARGS)" $(PEER_VENV)/bin/python -m pip install --quiet llama-cpp-python==0.3.36 numpy
	touch $@

bench-peer: $(STAMP) model $(PEER_STAMP)
	$(BIN)/python benchmarks/bench_peer.py --peer-python $(PEER_VENV)/bin/python

# Each model family against llama.cpp, next-token agreement position by position (check_peer.py).
check-peer: $(STAMP) $(PEER_STAMP)
	$(BIN)/python benchmarks/check_peer.py --peer-python $(PEER_VENV)/bin/python

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
