#!/bin/sh
# /bin/kestrel-net-test ROLE MIB PEER: kestrel's VM-to-VM network test
# (docs/linux-guests.md), run by /init for kestrel.net=ROLE:MIB:PEER. Both
# VMs serve HTTP on port 8080 (busybox httpd) and ping each other.
#   serve  writes MIB MiB of random data, prints its MD5, and waits (at most
#          300 s) until the peer serves /done, i.e. has fetched the data.
#   fetch  fetches the data over TCP (busybox wget), prints its MD5 and the
#          rate, serves /done, and waits until the server is gone.
# The host compares the two MD5 lines.
role=$1 mib=$2 peer=$3
www=/tmp/www
mkdir -p $www
httpd -p 8080 -h $www
now() { read t rest < /proc/uptime; echo "$t"; }
# retry N CMD...: CMD once a second until it succeeds, at most N times.
retry() {
    n=$1
    shift
    until "$@"; do
        n=$((n - 1))
        [ "$n" -le 0 ] && return 1
        sleep 1
    done
}
# The peer may still be booting: wait (at most 120 s) until it answers
# once, then count 3 pings.
retry 120 ping -c 1 -W 1 "$peer" > /dev/null 2>&1
if ping -c 3 -W 5 "$peer" > /tmp/ping 2>&1; then
    echo "LINUX-NET: ping $peer: $(grep 'packets transmitted' /tmp/ping)"
else
    echo "LINUX-NET: FAIL ping $peer: $(tail -n 2 /tmp/ping | tr '\n' ' ')"
fi
case "$role" in
serve)
    dd if=/dev/urandom of=$www/.data bs=1048576 count="$mib" 2>/dev/null
    mv $www/.data $www/data
    echo "LINUX-NET: serving $mib MiB md5 $(md5sum < $www/data | cut -d ' ' -f 1)"
    if ! retry 300 wget -q -O /tmp/done "http://$peer:8080/done" 2>/dev/null; then
        echo "LINUX-NET: FAIL the peer did not fetch the data within 300 s"
        exit 1
    fi
    echo "LINUX-NET: peer done ($(cat /tmp/done))"
    ;;
fetch)
    want=$((mib * 1048576))
    # One attempt: the whole file (the server renames it into place when
    # complete); t0 is when the last attempt started.
    fetch() {
        t0=$(now)
        wget -q -O /tmp/got "http://$peer:8080/data" 2>/dev/null \
            && [ "$(wc -c < /tmp/got)" -eq "$want" ]
    }
    if ! retry 120 fetch; then
        echo "LINUX-NET: FAIL no data from $peer within 120 tries"
        exit 1
    fi
    t1=$(now)
    rate=$(awk "BEGIN { d = $t1 - $t0; if (d <= 0) d = 0.01; printf \"%.2f\", $mib / d }")
    echo "LINUX-NET: fetched $mib MiB md5 $(md5sum < /tmp/got | cut -d ' ' -f 1) in $(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }") s ($rate MiB/s)"
    echo fetched > $www/done
    n=0
    while ping -c 1 -W 1 "$peer" > /dev/null 2>&1 && [ $n -lt 60 ]; do
        n=$((n + 1))
        sleep 1
    done
    ;;
*)
    echo "LINUX-NET: FAIL unknown role $role"
    exit 1
    ;;
esac
