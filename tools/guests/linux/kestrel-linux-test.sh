#!/bin/sh
# kestrel's Linux guest test (written by `cargo xtask guest-assets`).
# Usage: kestrel-linux-test [EXPECTED_CPUS]
want=$1
online=$(cat /sys/devices/system/cpu/online)
list=$(echo "$online" | awk -F, '{ for (i = 1; i <= NF; i++) { if (split($i, r, "-") == 2) { for (c = r[1]; c <= r[2]; c++) printf "%d ", c } else printf "%d ", $i } }')
n=$(echo $list | wc -w)
echo "LINUX-TEST: $n CPUs online ($online), expected ${want:-any}"
fail=""
if [ -n "$want" ] && [ "$n" != "$want" ]; then fail="$fail cpus=$n/$want"; fi
pin=taskset
command -v taskset >/dev/null 2>&1 || { pin=; echo "LINUX-TEST: no taskset: jobs not pinned"; }
read t0 rest < /proc/uptime
slot=0
for c in $list; do
    nterms=$(terms $slot)
    if [ -z "$nterms" ]; then echo "LINUX-TEST: cpu $c: no known answer for slot $slot"; break; fi
    ${pin:+taskset -c $c} awk -v n="$nterms" 'BEGIN {
        s = 0; t = 0; p = 1
        for (k = 1; k <= n; k++) { s += 1 / (k * k); t += p * 4 / (2 * k - 1); p = -p }
        getline st < "/proc/self/stat"; split(st, f, " ")
        printf "%.12f %.12f %s\n", s, t, f[39]
    }' > /tmp/fp.$slot 2>&1 &
    slot=$((slot + 1))
done
wait
read t1 rest < /proc/uptime
bad=0
slot=0
for c in $list; do
    want_fp=$(answer $slot)
    [ -n "$want_fp" ] || break
    set -- $(cat /tmp/fp.$slot)
    if [ "$1 $2" = "$want_fp" ] && { [ -z "$pin" ] || [ "$3" = "$c" ]; }; then
        echo "LINUX-TEST: fp cpu $c: ok ($(terms $slot) terms: $1 $2, ran on cpu $3)"
    else
        echo "LINUX-TEST: fp cpu $c: WRONG: got '$*', expected '$want_fp' on cpu $c"
        bad=$((bad + 1))
    fi
    slot=$((slot + 1))
done
echo "LINUX-TEST: fp work on $slot CPUs in parallel took $(awk -v a=$t0 -v b=$t1 'BEGIN { printf "%.2f", b - a }') s"
if [ "$bad" != 0 ]; then fail="$fail fp=$bad-wrong"; fi
if [ -z "$fail" ]; then
    echo "LINUX-TEST: PASS cpus=$n fp=ok"
else
    echo "LINUX-TEST: FAIL$fail"
fi
