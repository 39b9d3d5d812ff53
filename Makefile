# kestrel: one-command build, run and test. See README.md.
#
#   make run   [ARCH=aarch64|loongarch64] [SMP=N] [GIC=2|3] [APPEND="kestrel.exit=poweroff"]
#                             arm64 default: two Debian Linux VMs to busybox shells (Ctrl-] N
#                             switches the console; CONFIG=none boots kestrel alone)
#   make test                 host unit tests, FP check, QEMU smoke tests, VM tests (both arches)
#   make image [ARCH=...]     build the bootable image and print its path
#   make image|run CONFIG=f   ... with the VMs of config file f packed in (docs/config.md)
#   make debug [ARCH=...]     boot under QEMU waiting for gdb on :1234
#   make bench                benchmark tables: host simulations, VMs under kestrel, Linux boot,
#                             the seeds' experiments with Linux guests (SEEDS_OPTS=--quick: minutes)
#   make lint                 cargo fmt --check + clippy (host and both targets)
#   make fuzz [FUZZ_SECONDS=60] every cargo-fuzz target for FUZZ_SECONDS each (docs/fuzzing.md)
#   make setup                install what is missing (toolchain targets, QEMU 10)
#   make clean

ARCH     ?= aarch64
SMP      ?= 4
GIC      ?= 3
MEM      ?= 1024
FEATURES ?=
APPEND   ?=
CONFIG   ?=
CARGO    ?= cargo
# Options of `cargo xtask bench-seeds` in `make bench` (e.g. --quick, --only ipi).
SEEDS_OPTS ?=

XTASK_BASE = --arch $(ARCH) --smp $(SMP) --gic $(GIC) --mem $(MEM) \
             $(if $(FEATURES),--features "$(FEATURES)") $(if $(APPEND),--append "$(APPEND)")
XTASK_OPTS = $(XTASK_BASE) $(if $(CONFIG),--config "$(CONFIG)")

# What `make run` boots: the config given, else on arm64 the two-Linux-VM
# demo (its kernel and initramfs come from `cargo xtask guest-assets`).
DEMO_CONFIG = configs/linux-shell.toml
RUN_CONFIG  = $(if $(CONFIG),$(filter-out none,$(CONFIG)),$(if $(filter aarch64 arm64,$(ARCH)),$(DEMO_CONFIG)))

# build-std for LoongArch on the pinned stable toolchain
LA_BUILD = RUSTC_BOOTSTRAP=1 $(CARGO) clippy -p kestrel-boot --target loongarch64-unknown-none-softfloat \
           -Zbuild-std=core,alloc -Zbuild-std-features=compiler-builtins-mem

.PHONY: all setup setup-rust run test test-host test-qemu test-vm test-fuzz fuzz image debug bench lint check-fp clean

# Seconds per fuzz target: `make fuzz`, and the short run of `make test`.
FUZZ_SECONDS      ?= 60
TEST_FUZZ_SECONDS ?= 3

all: image

setup:
	@bash tools/setup.sh all

setup-rust:
	@bash tools/setup.sh rust

image: setup-rust
	@$(CARGO) xtask image $(XTASK_OPTS)

run: setup
ifeq ($(RUN_CONFIG),$(DEMO_CONFIG))
	@$(CARGO) xtask guest-assets
endif
	@$(CARGO) xtask run $(XTASK_BASE) $(if $(RUN_CONFIG),--config "$(RUN_CONFIG)")

debug: setup
	@$(CARGO) xtask debug $(XTASK_OPTS)

test: setup
	@$(MAKE) --no-print-directory test-host
	@$(MAKE) --no-print-directory test-fuzz
	@$(MAKE) --no-print-directory check-fp
	@$(MAKE) --no-print-directory test-qemu
	@$(MAKE) --no-print-directory test-vm

test-host: setup-rust
	$(CARGO) test

test-qemu: setup
	$(CARGO) xtask smoke

# kestrel running the test guests as VMs (one VM, VMs sharing pCPUs, VMID rollover)
test-vm: setup
	$(CARGO) xtask vmtest --arch aarch64
	$(CARGO) xtask vmtest --arch loongarch64

# Every fuzz target for a few seconds (tools/fuzz, docs/fuzzing.md).
test-fuzz: setup-rust
	@bash tools/setup.sh fuzz
	bash tools/fuzz/run.sh $(TEST_FUZZ_SECONDS)

fuzz: setup-rust
	@bash tools/setup.sh fuzz
	bash tools/fuzz/run.sh $(FUZZ_SECONDS)

check-fp: setup-rust
	$(CARGO) xtask check-fp

bench: setup
	$(CARGO) run --release -q -p kestrel-bench
	$(CARGO) xtask bench-vm
	$(CARGO) xtask bench-exits
	$(CARGO) xtask bench-linux
	$(CARGO) xtask bench-linux --config configs/bench/linux-hvc0.toml
	$(CARGO) xtask bench-net
	$(CARGO) xtask bench-seeds $(SEEDS_OPTS)

lint: setup-rust
	$(CARGO) fmt --all --check
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) clippy -p kestrel-boot --target aarch64-unknown-none-softfloat -- -D warnings
	$(LA_BUILD) -- -D warnings
	$(CARGO) clippy -p kestrel-guest-arm64-test --target aarch64-unknown-none -- -D warnings
	$(CARGO) clippy -p kestrel-seedbench --target aarch64-unknown-linux-musl -- -D warnings
	RUSTC_BOOTSTRAP=1 $(CARGO) clippy -p kestrel-guest-loongarch64-test --target loongarch64-unknown-none \
	    -Zbuild-std=core -Zbuild-std-features=compiler-builtins-mem -- -D warnings
	cd tools/fuzz && $(CARGO) fmt --check && $(CARGO) clippy --bins -- -D warnings

clean:
	$(CARGO) clean
	rm -rf build
