#!/bin/sh
# /init of kestrel's Linux guest initramfs and of its root filesystem image
# (written by `cargo xtask guest-assets`, docs/linux-guests.md). Kernel
# command line options:
#   kestrel.test_cpus=N      the test expects N CPUs online
#   kestrel.shell=1          interactive busybox shell instead of the test
#   kestrel.name=NAME        host name / prompt
#   kestrel.root=/dev/vdX    mount that ext4 disk and switch_root to it (this
#                            script runs again there, KESTREL_ROOT set)
#   kestrel.console=hvc0     the test or shell on /dev/hvc0 (virtio console)
#   kestrel.ip=ADDR/LEN      eth0 up with that address (virtio net)
#   kestrel.net=ROLE:MIB:PEER  after the test, the VM-to-VM network test
#                            (/bin/kestrel-net-test: serve or fetch MIB MiB)
#   kestrel.reboots=N        on a root disk: count this boot in
#                            /var/lib/kestrel-boots there and `reboot -f`
#                            until N reboots are done, then go on
#   kestrel.reboots=N:/dev/vdX  the same, counting in kestrel-boots on that
#                            ext4 disk (mounted for it), root disk or not
#   kestrel.bench=CMD+CMD    after the test, each CMD (commas for spaces) as
#                            `kestrel-seedbench CMD`, e.g.
#                            kestrel.bench=futex,threads=16,rounds=100
#   kestrel.test=0           skip the test (benchmark boots)
#   kestrel.pt=/dev/vdX      after the test, the passthrough test: mount that
#                            ext4 disk, print its hello.txt, write pt.txt and
#                            1 MiB pt.bin, print what was written, unmount
#   kestrel.fpsleep=ROUNDS:US  after the test, the FP sleeper on every CPU
#                            (/bin/kestrel-fp-sleep: ROUNDS rounds of FP
#                            work with known answers, US microseconds of
#                            sleep after each)
#   kestrel.disk=/dev/vdX    after that, the raw disk test: the label on
#                            its first line, then 64 KiB written at 512 KiB
#                            and read back, both with O_DIRECT
#   kestrel.irqcpu=N,M:/dev/vdX  after the test, the interrupt routing
#                            test: for CPU N, then M, every virtio interrupt's
#                            affinity set to it, that disk read with O_DIRECT:
#                            that CPU must take the read's virtio interrupts
if [ -n "$KESTREL_ROOT" ]; then
    echo "LINUX-INIT: started on root $KESTREL_ROOT"
else
    echo "LINUX-INIT: started"
fi
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root
# No 2>/dev/null before devtmpfs is mounted: on a root disk that would
# create a file there, or fail on a read-only one; 2>&- discards instead.
/bin/busybox mkdir -p /proc /sys /dev /tmp /root /sbin /usr/bin /usr/sbin 2>&-
/bin/busybox --install -s 2>&-
if [ ! -e /bin/mount ]; then
    # A read-only root disk: scratch space and the applet links in a tmpfs.
    /bin/busybox mount -t tmpfs tmpfs /tmp
    /bin/busybox mkdir -p /tmp/bin
    /bin/busybox --install -s /tmp/bin
    PATH=$PATH:/tmp/bin
fi
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>&-
read up rest < /proc/uptime
# Stolen time (/proc/stat's steal column, USER_HZ ticks, all CPUs): the
# kernel accounts it when the hypervisor offers it (arm64: "arm-pv: using
# stolen time PV" at boot). Printed at the end beside this first value.
steal() { awk '/^cpu / { print $9 }' /proc/stat; }
steal0=$(steal)
shell=0 cpus= name=linux root= console= ip= net= reboots= pt= bench= test=1 irqcpu= fpsleep= disk=
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        kestrel.shell=1) shell=1 ;;
        kestrel.test_cpus=*) cpus=${arg#*=} ;;
        kestrel.name=*) name=${arg#*=} ;;
        kestrel.root=*) root=${arg#*=} ;;
        kestrel.console=*) console=${arg#*=} ;;
        kestrel.ip=*) ip=${arg#*=} ;;
        kestrel.net=*) net=${arg#*=} ;;
        kestrel.reboots=*) reboots=${arg#*=} ;;
        kestrel.pt=*) pt=${arg#*=} ;;
        kestrel.bench=*) bench=${arg#*=} ;;
        kestrel.test=0) test=0 ;;
        kestrel.irqcpu=*) irqcpu=${arg#*=} ;;
        kestrel.fpsleep=*) fpsleep=${arg#*=} ;;
        kestrel.disk=*) disk=${arg#*=} ;;
    esac
done

# The virtio modules, in dependency order; a module already loaded (the
# second run, on the root disk) is skipped. No virtio device is no error.
order=/lib/modules/$(uname -r)/kestrel-load-order
if [ -r "$order" ]; then
    loaded= failed=
    while read -r m; do
        mod=${m##*/}
        mod=${mod%.ko}
        [ -d "/sys/module/$mod" ] && continue
        if insmod "/lib/modules/$(uname -r)/kernel/$m" 2>/tmp/insmod.err; then
            loaded="$loaded $mod"
        else
            failed="$failed $mod($(cat /tmp/insmod.err))"
        fi
    done < "$order"
    [ -n "$loaded" ] && echo "LINUX-INIT: modules loaded:$loaded"
    [ -n "$failed" ] && echo "LINUX-INIT: modules that failed to load:$failed"
    devs=
    for d in /sys/bus/virtio/devices/*; do
        [ -r "$d/device" ] || continue
        case $(cat "$d/device") in
            0x0001) devs="$devs net" ;;
            0x0002) devs="$devs block" ;;
            0x0003) devs="$devs console" ;;
            *) devs="$devs $(cat "$d/device")" ;;
        esac
    done
    [ -z "$KESTREL_ROOT" ] && echo "LINUX-INIT: virtio devices:${devs:- none}"
fi

# wait_for PATH: up to 5 s for a device node (devtmpfs makes it).
wait_for() {
    n=0
    while [ ! -e "$1" ] && [ $n -lt 50 ]; do
        usleep 100000
        n=$((n + 1))
    done
    [ -e "$1" ]
}

if [ -n "$root" ] && [ -z "$KESTREL_ROOT" ]; then
    mkdir -p /newroot
    if ! wait_for "$root"; then
        echo "LINUX-INIT: root $root: no such device after 5 s: staying in the initramfs"
    elif ! mount -t ext4 "$root" /newroot 2>/tmp/mount.err; then
        echo "LINUX-INIT: root $root: mount failed: $(cat /tmp/mount.err): staying in the initramfs"
    elif [ ! -x /newroot/init ]; then
        echo "LINUX-INIT: root $root has no /init: staying in the initramfs"
        umount /newroot
    else
        mode=read-write
        grep -q "^$root /newroot ext4 ro" /proc/mounts && mode=read-only
        echo "LINUX-INIT: root mounted from $root (ext4, $mode): switch_root"
        umount /dev /sys /proc
        export KESTREL_ROOT=$root
        exec switch_root /newroot /init
    fi
fi

hostname "$name"

# The boot count lives on a disk: a reboot keeps it (fresh RAM, same disk).
count_disk= count_file=
case "$reboots" in
    *:*)
        count_disk=${reboots#*:}
        reboots=${reboots%%:*}
        mkdir -p /mnt/count
        if wait_for "$count_disk" && mount -t ext4 "$count_disk" /mnt/count 2>/tmp/mount.err; then
            count_file=/mnt/count/kestrel-boots
        else
            echo "LINUX-INIT: kestrel.reboots: cannot mount $count_disk: $(cat /tmp/mount.err 2>&-)"
            reboots=
        fi
        ;;
    ?*)
        if [ -n "$KESTREL_ROOT" ]; then
            count_disk=$KESTREL_ROOT count_file=/var/lib/kestrel-boots
            mkdir -p /var/lib
        else
            echo "LINUX-INIT: kestrel.reboots=$reboots needs a root disk (or N:/dev/vdX)"
            reboots=
        fi
        ;;
esac
if [ -n "$reboots" ]; then
    boots=$(cat "$count_file" 2>&- || echo 0)
    boots=$((boots + 1))
    echo "$boots" > "$count_file"
    sync
    [ "$count_file" = /mnt/count/kestrel-boots ] && umount /mnt/count
    if [ "$boots" -le "$reboots" ]; then
        echo "LINUX-INIT: boot $boots of $((reboots + 1)) on $count_disk: reboot -f"
        reboot -f
        sleep 5
        echo "LINUX-INIT: reboot -f returned"
    fi
    echo "LINUX-INIT: boot $boots of $((reboots + 1)) on $count_disk: $reboots reboot(s) done, the disk kept the count"
fi
echo "LINUX-INIT: $name: kernel $(uname -r), up ${up} s, $(grep -c ^processor /proc/cpuinfo) CPUs"

if [ -n "$ip" ]; then
    if [ -e /sys/class/net/eth0 ]; then
        ip link set lo up
        if ip addr add "$ip" dev eth0 && ip link set eth0 up; then
            echo "LINUX-INIT: eth0 up $ip"
        else
            echo "LINUX-INIT: eth0: cannot set $ip"
        fi
    else
        echo "LINUX-INIT: kestrel.ip=$ip: no eth0 (no virtio-net device)"
    fi
fi

tty=
if [ -n "$console" ]; then
    if wait_for "/dev/$console"; then
        tty=/dev/$console
        echo "LINUX-INIT: console on $console (the test or shell continues there)"
        echo "LINUX-INIT: console on $console" > "$tty"
    else
        echo "LINUX-INIT: kestrel.console=$console: no /dev/$console: staying on this console"
    fi
fi

# pt_test DEV: the passthrough test on a host disk given to this VM.
pt_test() {
    if ! wait_for "$1"; then
        echo "LINUX-PT: FAIL $1: no such device after 5 s"
        return
    fi
    mkdir -p /mnt/pt
    if ! mount -t ext4 "$1" /mnt/pt 2>/tmp/pt.err; then
        echo "LINUX-PT: FAIL mount $1: $(cat /tmp/pt.err)"
        return
    fi
    echo "LINUX-PT: mounted $1, hello.txt says: $(cat /mnt/pt/hello.txt)"
    text="written by $name through passthrough $(cat /proc/sys/kernel/random/uuid)"
    echo "$text" > /mnt/pt/pt.txt
    dd if=/dev/urandom of=/mnt/pt/pt.bin bs=64k count=16 2>/dev/null
    sum=$(md5sum /mnt/pt/pt.bin)
    sync
    if umount /mnt/pt; then
        echo "LINUX-PT: wrote pt.txt: $text"
        echo "LINUX-PT: wrote pt.bin: 1 MiB md5 ${sum%% *}"
    else
        echo "LINUX-PT: FAIL umount $1"
    fi
}

# disk_test DEV: the raw disk test on a virtio disk: its first line (the
# label the host wrote), then 64 KiB of random data written at 512 KiB and
# read back, both with O_DIRECT (through the device, not the page cache).
disk_test() {
    if ! wait_for "$1"; then
        echo "LINUX-DISK: FAIL $1: no such device after 5 s"
        return
    fi
    label=$(head -c 512 "$1" | tr -d '\000' | head -n 1)
    dd if=/dev/urandom of=/tmp/disk.w bs=64k count=1 2>/dev/null
    if ! dd if=/tmp/disk.w of="$1" bs=64k seek=8 count=1 oflag=direct conv=notrunc 2>/tmp/disk.err; then
        echo "LINUX-DISK: FAIL write $1: $(cat /tmp/disk.err)"
        return
    fi
    if ! dd if="$1" of=/tmp/disk.r bs=64k skip=8 count=1 iflag=direct 2>/tmp/disk.err; then
        echo "LINUX-DISK: FAIL read $1: $(cat /tmp/disk.err)"
        return
    fi
    w=$(md5sum < /tmp/disk.w | cut -d ' ' -f 1)
    r=$(md5sum < /tmp/disk.r | cut -d ' ' -f 1)
    echo "LINUX-DISK: $1 label '$label', wrote 64 KiB at 512 KiB md5 $w, read back md5 $r"
}

# irq_test CPUS:DEV: for each CPU of the comma-separated CPUS, every
# virtio interrupt moved to it, then DEV read with O_DIRECT: that CPU must
# take the virtio interrupts of the read, at least 9 in 10 of them
# (/proc/interrupts: "IRQ: count-per-CPU... chip hwirq name", CPU N's
# count is field N + 2).
irq_test() {
    dev=${1#*:}
    irqs=$(awk '/virtio/ { sub(":", "", $1); print $1 }' /proc/interrupts)
    if [ -z "$irqs" ] || ! wait_for "$dev"; then
        echo "LINUX-IRQ: FAIL no virtio interrupt or no $dev"
        return
    fi
    all() { awk '/virtio/ { for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) s += $i } END { print s + 0 }' /proc/interrupts; }
    for cpu in $(echo "${1%%:*}" | tr , ' '); do
        for i in $irqs; do
            echo "$cpu" > "/proc/irq/$i/smp_affinity_list" 2>/tmp/irq.err ||
                echo "LINUX-IRQ: irq $i to cpu $cpu: $(cat /tmp/irq.err)"
        done
        on_cpu() { awk -v f=$((cpu + 2)) '/virtio/ { s += $f } END { print s + 0 }' /proc/interrupts; }
        before=$(on_cpu) total=$(all)
        dd if="$dev" of=/dev/null bs=16k iflag=direct 2>/tmp/irq.err ||
            echo "LINUX-IRQ: dd $dev: $(cat /tmp/irq.err)"
        got=$(($(on_cpu) - before)) total=$(($(all) - total))
        grep virtio /proc/interrupts | sed 's/^ */LINUX-IRQ: /'
        if [ "$got" -gt 0 ] && [ $((got * 10)) -ge $((total * 9)) ]; then
            echo "LINUX-IRQ: PASS cpu $cpu took $got of $total virtio interrupts reading $dev"
        else
            echo "LINUX-IRQ: FAIL cpu $cpu took $got of $total virtio interrupts reading $dev"
        fi
    done
}

if [ "$shell" = 1 ]; then
    msg="LINUX-INIT: $name: busybox shell ('kestrel-linux-test N' runs the test, 'poweroff -f' powers off)"
    export PS1="$name:\w# "
    if [ -n "$tty" ]; then
        echo "$msg" > "$tty"
        # A session leader opening the tty makes it its controlling terminal.
        setsid sh -c "exec sh <$tty >$tty 2>&1"
    else
        echo "$msg"
        setsid cttyhack sh
    fi
elif [ -n "$tty" ]; then
    /bin/kestrel-linux-test "$cpus" <"$tty" >"$tty" 2>&1
    [ -n "$net" ] && /bin/kestrel-net-test $(echo "$net" | tr : ' ') <"$tty" >"$tty" 2>&1
else
    [ "$test" = 1 ] && /bin/kestrel-linux-test "$cpus"
    [ -n "$fpsleep" ] && /bin/kestrel-fp-sleep $(echo "$fpsleep" | tr : ' ')
    [ -n "$disk" ] && disk_test "$disk"
    [ -n "$net" ] && /bin/kestrel-net-test $(echo "$net" | tr : ' ')
    [ -n "$pt" ] && pt_test "$pt"
    [ -n "$irqcpu" ] && irq_test "$irqcpu"
    # The seeds' workloads (docs/performance.md): one command per `+`.
    for cmd in $(echo "$bench" | tr + ' '); do
        echo "LINUX-BENCH: kestrel-seedbench $(echo "$cmd" | tr , ' ')"
        /bin/kestrel-seedbench $(echo "$cmd" | tr , ' ') ||
            echo "LINUX-BENCH: FAIL kestrel-seedbench $cmd exited with $?"
    done
fi
echo "LINUX-STEAL: /proc/stat steal $steal0 -> $(steal) (USER_HZ ticks, all CPUs)"
poweroff -f
sleep 5
echo "LINUX-INIT: poweroff -f returned"
