#!/bin/sh
# kestrel's FP sleeper (written by `cargo xtask guest-assets`).
# Usage: kestrel-fp-sleep ROUNDS SLEEP_US
# On every online CPU at once, pinned there: one awk process that computes
# the same two series ROUNDS times (known answers, per CPU slot), sleeping
# SLEEP_US microseconds after each round, so that the CPU idles and the
# hypervisor runs other vCPUs (of 32- and 64-bit VMs alike) between the
# rounds while the process keeps its FP state. Every round's digits must
# be the known answer. Each CPU's line gives the seconds its rounds took
# (from /proc/uptime), the PASS line the longest of them, so that a
# benchmark can tell the period a round really had (for a 1 us sleep it is
# the FP work and the spawn of usleep, not the sleep).
rounds=${1:-10} us=${2:-20000}
online=$(cat /sys/devices/system/cpu/online)
list=$(echo "$online" | awk -F, '{ for (i = 1; i <= NF; i++) { if (split($i, r, "-") == 2) { for (c = r[1]; c <= r[2]; c++) printf "%d ", c } else printf "%d ", $i } }')
pin=taskset
command -v taskset >/dev/null 2>&1 || pin=
slot=0
for c in $list; do
    n=$(sleep_terms $slot)
    want=$(sleep_answer $slot)
    if [ -z "$n" ]; then echo "LINUX-FPSLEEP: cpu $c: no known answer for slot $slot"; break; fi
    ${pin:+taskset -c $c} awk -v n="$n" -v want="$want" -v rounds="$rounds" -v us="$us" 'BEGIN {
        wrong = 0
        getline up < "/proc/uptime"; close("/proc/uptime"); split(up, u0, " ")
        for (r = 1; r <= rounds; r++) {
            s = 0; t = 0; p = 1
            for (k = 1; k <= n; k++) { s += 1 / (k * k); t += p * 4 / (2 * k - 1); p = -p }
            got = sprintf("%.12f %.12f", s, t)
            if (got != want) { wrong++; last = got }
            system("usleep " us)
        }
        getline up < "/proc/uptime"; split(up, u1, " ")
        getline st < "/proc/self/stat"; split(st, f, " ")
        printf "%d %d %s %.2f %s\n", rounds, wrong, f[39], u1[1] - u0[1], last
    }' > /tmp/fpsleep.$slot 2>&1 &
    slot=$((slot + 1))
done
wait
bad=0 cpus=0 secs=0
slot=0
for c in $list; do
    [ -n "$(sleep_terms $slot)" ] || break
    set -- $(cat /tmp/fpsleep.$slot)
    if [ "$1" = "$rounds" ] && [ "$2" = 0 ] && { [ -z "$pin" ] || [ "$3" = "$c" ]; }; then
        echo "LINUX-FPSLEEP: cpu $c: $1 rounds of $(sleep_terms $slot) terms, a ${us} us sleep after each, 0 wrong, in $4 s"
        secs=$(awk -v a="$secs" -v b="$4" 'BEGIN { print (b > a) ? b : a }')
    else
        echo "LINUX-FPSLEEP: cpu $c: WRONG: got '$*' (rounds wrong cpu seconds last-wrong-answer), expected $rounds rounds, 0 wrong, on cpu $c: '$(sleep_answer $slot)'"
        bad=$((bad + 1))
    fi
    cpus=$((cpus + 1))
    slot=$((slot + 1))
done
if [ "$bad" = 0 ] && [ "$cpus" -gt 0 ]; then
    echo "LINUX-FPSLEEP: PASS cpus=$cpus rounds=$rounds wrong=0 seconds=$secs"
else
    echo "LINUX-FPSLEEP: FAIL cpus=$cpus bad=$bad"
fi
