# kestrel: one-command build, run and test. See README.md.
#
#   make run   [ARCH=aarch64|loongarch64] [SMP=N] [GIC=2|3] [LVZ=1|0] [APPEND="kestrel.exit=poweroff"]
#                             default: two Debian Linux VMs to busybox shells (LoongArch: with LVZ=1) (Ctrl-] N
#                             switches the console; CONFIG=none boots kestrel alone)
#   make test                 host unit tests, loom models, FP check, QEMU smoke tests, VM tests (both arches)
#   make test-loom            the loom models of the lock-free and cross-pCPU protocols (docs/concurrency.md)
#   make image [ARCH=...]     build the bootable image and print its path
#   make image|run CONFIG=f   ... with the VMs of config file f packed in (docs/config.md)
#   make debug [ARCH=...]     boot under QEMU waiting for gdb on :1234
#   make bench                benchmark tables: host simulations, VMs under kestrel, Linux boot,
#                             the seeds' experiments with Linux guests (SEEDS_OPTS=--quick: minutes)
#   make lint                 cargo fmt --check + the layering checks (kernel/layers.txt, tools/xtask/layers.txt) + clippy (host, the loom build and both targets)
#   make fuzz [FUZZ_SECONDS=60] every cargo-fuzz target for FUZZ_SECONDS each (docs/fuzzing.md)
#   make setup                install what is missing (toolchain targets, QEMU 10)
#   make clean

ARCH     ?= aarch64
SMP      ?= 4
# LoongArch: 1 boots on the emulator with LVZ that setup installs
# (kestrel's LVZ backend), 0 on stock QEMU 10 (trap-and-emulate).
LVZ      ?= 1
GIC      ?= 3
MEM      ?= 1024
FEATURES ?=
APPEND   ?=
CONFIG   ?=
CARGO    ?= cargo
# Options of `cargo xtask bench-seeds` in `make bench` (e.g. --quick, --only ipi).
SEEDS_OPTS ?=

XTASK_BASE = --arch $(ARCH) --smp $(SMP) --gic $(GIC) --mem $(MEM) \
             $(if $(FEATURES),--features "$(FEATURES)") $(if $(APPEND),--append "$(APPEND)") \
             $(if $(and $(filter loongarch64 la64,$(ARCH)),$(filter 1,$(LVZ))),--lvz)
XTASK_OPTS = $(XTASK_BASE) $(if $(CONFIG),--config "$(CONFIG)")

# What `make run` boots: the config given, else the two-Linux-VM demo (on
# arm64, and on LoongArch with LVZ; its kernel, initramfs and root disk come
# from `cargo xtask guest-assets [--arch loongarch64]`).
DEMO_CONFIG    = configs/linux-shell.toml
LA_DEMO_CONFIG = configs/la64-linux-shell.toml
RUN_CONFIG  = $(if $(CONFIG),$(filter-out none,$(CONFIG)),$(if $(filter aarch64 arm64,$(ARCH)),$(DEMO_CONFIG),$(if $(filter 1,$(LVZ)),$(LA_DEMO_CONFIG))))

# The build tool itself, built visibly first (the `cargo xtask` alias is
# quiet, and its first build takes about a minute).
XTASK_BUILD = @echo "make: building the build tool (cargo build -p xtask) ..." && $(CARGO) build -p xtask

# build-std for LoongArch on the pinned stable toolchain
LA_BUILD = RUSTC_BOOTSTRAP=1 $(CARGO) clippy -p kestrel-boot --target loongarch64-unknown-none-softfloat \
           -Zbuild-std=core,alloc -Zbuild-std-features=compiler-builtins-mem

.PHONY: all setup setup-rust run test test-host test-loom test-qemu test-vm test-fuzz fuzz image debug bench lint check-fp clean

# Seconds per fuzz target: `make fuzz`, and the short run of `make test`.
FUZZ_SECONDS      ?= 60
TEST_FUZZ_SECONDS ?= 3

all: image

setup:
	@bash tools/setup.sh all

setup-rust:
	@bash tools/setup.sh rust

image: setup-rust
	$(XTASK_BUILD)
	@$(CARGO) xtask image $(XTASK_OPTS)

run: setup
	$(XTASK_BUILD)
ifeq ($(RUN_CONFIG),$(DEMO_CONFIG))
	@$(CARGO) xtask guest-assets
endif
ifeq ($(RUN_CONFIG),$(LA_DEMO_CONFIG))
	@$(CARGO) xtask guest-assets --arch loongarch64
endif
	@$(CARGO) xtask run $(XTASK_BASE) $(if $(RUN_CONFIG),--config "$(RUN_CONFIG)")

debug: setup
	$(XTASK_BUILD)
	@$(CARGO) xtask debug $(XTASK_OPTS)

test: setup
	@$(MAKE) --no-print-directory test-host
	@$(MAKE) --no-print-directory test-loom
	@$(MAKE) --no-print-directory test-fuzz
	@$(MAKE) --no-print-directory check-fp
	@$(MAKE) --no-print-directory test-qemu
	@$(MAKE) --no-print-directory test-vm

test-host: setup-rust
	$(CARGO) test

# Every interleaving (within a preemption bound) of the VMID, lazy FP,
# first-touch, scheduler and PV IPI protocols under loom (docs/concurrency.md).
# Its own target dir: the loom build does not disturb the normal one.
test-loom: setup-rust
	RUSTFLAGS="--cfg loom" $(CARGO) test --profile loom -p kestrel-kernel \
	    --target-dir target/loom --test 'loom_*'

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
	$(CARGO) xtask bench-linux --arch loongarch64
	$(CARGO) xtask bench-net
	$(CARGO) xtask bench-seeds $(SEEDS_OPTS)

lint: setup-rust
	$(CARGO) fmt --all --check
	$(CARGO) xtask layers --tree kernel
	$(CARGO) xtask layers --tree xtask
	$(CARGO) clippy --all-targets -- -D warnings
	RUSTFLAGS="--cfg loom" $(CARGO) clippy --profile loom -p kestrel-kernel --target-dir target/loom \
	    --lib --test 'loom_*' -- -D warnings
	$(CARGO) clippy -p kestrel-boot --target aarch64-unknown-none-softfloat -- -D warnings
	$(LA_BUILD) -- -D warnings
	$(CARGO) clippy -p kestrel-guest-arm64-test --target aarch64-unknown-none -- -D warnings
	$(CARGO) clippy -p kestrel-seedbench --target aarch64-unknown-linux-musl -- -D warnings
	RUSTC_BOOTSTRAP=1 $(CARGO) clippy -p kestrel-guest-loongarch64-test --target loongarch64-unknown-none \
	    -Zbuild-std=core -Zbuild-std-features=compiler-builtins-mem -- -D warnings
	RUSTC_BOOTSTRAP=1 $(CARGO) clippy -p kestrel-seedbench-nostd --target loongarch64-unknown-none \
	    -Zbuild-std=core -Zbuild-std-features=compiler-builtins-mem -- -D warnings
	cd tools/fuzz && $(CARGO) fmt --check && $(CARGO) clippy --bins -- -D warnings

clean:
	$(CARGO) clean
	rm -rf build
