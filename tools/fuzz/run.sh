#!/usr/bin/env bash
# Runs every fuzz target (or those named) for SECONDS each; prints one line
# per target and, on a failure, the end of its log and the crashing input.
# Usage: tools/fuzz/run.sh SECONDS [target...]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
secs=${1:-60}
shift || true
all=(vgic loongarch loongarch_intc loongarch_steal hypercall_psci uart esr_idregs aarch32 package vmconfig dtb_reader fdt_writer vmid sched virtio acpi acpi_loongarch boot_memory)
targets=("${@:-${all[@]}}")
fuzz=(env RUSTC_BOOTSTRAP=1 cargo fuzz)
opts=(--fuzz-dir tools/fuzz -s none)
start=$(date +%s)
mkdir -p build/fuzz
"${fuzz[@]}" build "${opts[@]}" >/dev/null 2>build/fuzz-build.log || { tail -30 build/fuzz-build.log; exit 1; }
echo "fuzz: built in $(( $(date +%s) - start )) s"
bin=tools/fuzz/target/$(rustc -vV | sed -n 's/^host: //p')/release
failed=0
for t in "${targets[@]}"; do
    log=build/fuzz/$t.log
    # The binaries directly (what `cargo fuzz run` does, without a cargo
    # invocation per target).
    mkdir -p "tools/fuzz/corpus/$t" "tools/fuzz/artifacts/$t"
    if "$bin/$t" -artifact_prefix="tools/fuzz/artifacts/$t/" -max_total_time="$secs" \
        -timeout=10 -rss_limit_mb=2048 "tools/fuzz/corpus/$t" >"$log" 2>&1; then
        runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log")
        echo "fuzz: $t ok (${runs:-?} runs in ${secs} s)"
    else
        failed=1
        echo "fuzz: $t FAILED (log: $log)"
        grep -m1 -A6 -E 'panicked at|ERROR: libFuzzer' "$log" || tail -20 "$log"
        grep -m1 'Test unit written to' "$log" || true
    fi
done
echo "fuzz: total $(( $(date +%s) - start )) s"
exit $failed
