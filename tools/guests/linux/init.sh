#!/bin/sh
# /init of kestrel's Linux guest initramfs (written by `cargo xtask guest-assets`,
# docs/linux-guests.md). Kernel command line options:
#   kestrel.test_cpus=N   the test expects N CPUs online
#   kestrel.shell=1       interactive busybox shell instead of the test
#   kestrel.name=NAME     host name / prompt
echo "LINUX-INIT: started"
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root
/bin/busybox mkdir -p /proc /sys /dev /tmp /root /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
read up rest < /proc/uptime
shell=0 cpus= name=linux
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        kestrel.shell=1) shell=1 ;;
        kestrel.test_cpus=*) cpus=${arg#*=} ;;
        kestrel.name=*) name=${arg#*=} ;;
    esac
done
hostname "$name"
echo "LINUX-INIT: $name: kernel $(uname -r), up ${up} s, $(grep -c ^processor /proc/cpuinfo) CPUs"
if [ "$shell" = 1 ]; then
    echo "LINUX-INIT: $name: busybox shell ('kestrel-linux-test N' runs the test, 'poweroff -f' powers off)"
    export PS1="$name:\w# "
    setsid cttyhack sh
else
    /bin/kestrel-linux-test "$cpus"
fi
poweroff -f
sleep 5
echo "LINUX-INIT: poweroff -f returned"
