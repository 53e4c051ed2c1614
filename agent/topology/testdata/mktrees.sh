#!/bin/bash
# Builds the small sysfs/procfs trees the unit tests read. Run from this directory;
# it replaces each tree. The trees are committed: this documents how they were made.
set -e
cd "$(dirname "$0")"
w() { mkdir -p "$(dirname "$1")"; printf '%b' "$2" > "$1"; }
node() { # root id cpulist memkB distance
  local d=$1/sys/devices/system/node/node$2
  w $d/cpulist "$3\n"; w $d/meminfo "Node $2 MemTotal:       $4 kB\nNode $2 MemFree:        1024 kB\nNode $2 MemUsed:        1024 kB\n"
  w $d/distance "$5\n"
}
# pcidev root relpath(under sys/devices) class vendor device numa local_cpulist driver
pcidev() {
  local r=$1 p=$2 addr; addr=$(basename $p)
  local d=$r/sys/devices/$p
  w $d/class "$3\n"; w $d/vendor "$4\n"; w $d/device "$5\n"
  [ "$6" != "none" ] && w $d/numa_node "$6\n"
  [ "$7" != "none" ] && w $d/local_cpulist "$7\n"
  if [ -n "$8" ]; then mkdir -p $r/sys/bus/pci/drivers/$8; ln -s $(realpath --relative-to=$d $r/sys/bus/pci/drivers/$8) $d/driver; fi
  mkdir -p $r/sys/bus/pci/devices
  ln -s ../../../devices/$p $r/sys/bus/pci/devices/$addr
}
# netdev root name devpath(under sys/devices, or virtual) type speed
netdev() {
  local r=$1 n=$2 d
  mkdir -p $r/sys/class/net
  if [ "$3" = virtual ]; then d=$r/sys/devices/virtual/net/$n; mkdir -p $d; ln -s ../../devices/virtual/net/$n $r/sys/class/net/$n
  else d=$r/sys/devices/$3/net/$n; mkdir -p $d; ln -s ../../devices/$3/net/$n $r/sys/class/net/$n; ln -s ../.. $d/device; fi
  w $d/type "$4\n"; [ "$5" != none ] && w $d/speed "$5\n"; true
}
cpus() { # root online count
  w $1/sys/devices/system/cpu/online "$2\n"
  for i in $(seq 0 $(($3-1))); do mkdir -p $1/sys/devices/system/cpu/cpu$i; done
}

R=two-numa; rm -rf $R
cpus $R 0-15 16
w $R/sys/devices/system/node/online "0-1\n"
node $R 0 0-7 16777216 "10 21"
node $R 1 8-15 16777216 "21 10"
w $R/proc/meminfo "MemTotal:       33554432 kB\nMemFree:        1024 kB\n"
pcidev $R pci0000:00/0000:00:00.0 0x060000 0x8086 0x2020 0 0-7 ""
pcidev $R pci0000:00/0000:00:01.0 0x060400 0x8086 0x2030 0 0-7 pcieport
pcidev $R pci0000:00/0000:00:01.0/0000:02:00.0 0x020000 0x8086 0x1521 0 0-7 igb
pcidev $R pci0000:00/0000:00:02.0 0x010802 0x144d 0xa808 0 0-7 nvme
pcidev $R pci0000:80/0000:80:02.0 0x060400 0x8086 0x2032 1 8-15 pcieport
pcidev $R pci0000:80/0000:80:02.0/0000:81:00.0 0x030200 0x10de 0x20b0 1 8-15 nvidia
pcidev $R pci0000:80/0000:80:03.0 0x060400 0x8086 0x2033 1 8-15 pcieport
pcidev $R pci0000:80/0000:80:03.0/0000:82:00.0 0x030200 0x10de 0x20b0 1 8-15 nvidia
pcidev $R pci0000:80/0000:80:04.0 0x120000 0x1da3 0x1000 1 8-15 ""
netdev $R eth0 pci0000:00/0000:00:01.0/0000:02:00.0 1 10000
netdev $R lo virtual 772 none
netdev $R veth0 virtual 1 10000
netdev $R br0 virtual 1 -1

R=no-numa; rm -rf $R
cpus $R 0-3 4
w $R/proc/meminfo "MemTotal:        8046524 kB\nMemFree:        1024 kB\n"
pcidev $R pci0000:00/0000:00:03.0 0x020000 0x1af4 0x1000 -1 0-3 virtio-pci
mkdir -p $R/sys/devices/pci0000:00/0000:00:03.0/virtio0/net/eth0
w $R/sys/devices/pci0000:00/0000:00:03.0/virtio0/net/eth0/type "1\n"
ln -s ../../../virtio0 $R/sys/devices/pci0000:00/0000:00:03.0/virtio0/net/eth0/device
mkdir -p $R/sys/class/net; ln -s ../../devices/pci0000:00/0000:00:03.0/virtio0/net/eth0 $R/sys/class/net/eth0

R=memory-tier; rm -rf $R
cpus $R 0-3 4
node $R 0 0-3 8388608 "10 20"
node $R 1 "" 4194304 "20 10"

R=offline-cpus; rm -rf $R
cpus $R 0,2-6 8
for i in 1 2 3 4 5 6 7; do w $R/sys/devices/system/cpu/cpu$i/online "1\n"; done
w $R/sys/devices/system/cpu/cpu1/online "0\n"; w $R/sys/devices/system/cpu/cpu7/online "0\n"
node $R 0 0-3 8388608 "10 21"
node $R 1 4-7 8388608 "21 10"

# numa_node is -1 everywhere (firmware without _PXM): locality from local CPUs.
R=numa-inference; rm -rf $R
cpus $R 0-7 8
node $R 0 0-3 4194304 "10 21"
node $R 1 4-7 4194304 "21 10"
# device's own local_cpulist
pcidev $R pci0000:00/0000:00:02.0 0x030000 0x1002 0x67df -1 0-3 amdgpu
# no local_cpulist, only the local_cpus mask
pcidev $R pci0000:40/0000:40:01.0/0000:41:00.0 0x020000 0x15b3 0x1017 -1 none mlx5_core
w $R/sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0/local_cpus "000000f0\n"
# nothing on the device: its parent bridge's local_cpulist
pcidev $R pci0000:40/0000:40:01.0 0x060400 0x8086 0x2030 -1 4-7 pcieport
pcidev $R pci0000:40/0000:40:01.0/0000:42:00.0 0x120000 0x1da3 0x1000 none none ""
# nothing up to the host bridge: the root bus's cpulistaffinity
pcidev $R pci0000:60/0000:60:00.0 0x010802 0x144d 0xa808 -1 none nvme
mkdir -p $R/sys/devices/pci0000:60/pci_bus/0000:60; w $R/sys/devices/pci0000:60/pci_bus/0000:60/cpulistaffinity "0-3\n"
# local to both nodes: unknown
pcidev $R pci0000:00/0000:00:1f.0 0x060100 0x8086 0x1d41 -1 0-7 ""
# local_cpulist empty: unknown (walks up to pci0000:7f which says nothing)
pcidev $R pci0000:7f/0000:7f:08.0 0x088000 0x8086 0x3c80 -1 "" ""

R=malformed-cpulist; rm -rf $R
cpus $R 0-3 4
node $R 0 "0-1,x" 4194304 "10"

R=truncated-meminfo; rm -rf $R
cpus $R 0-3 4
node $R 0 0-3 4194304 "10"
printf 'Node 0 MemFree:        1024 kB\nNode 0 Mem' > $R/sys/devices/system/node/node0/meminfo

R=dangling-symlink; rm -rf $R
cpus $R 0-3 4
w $R/proc/meminfo "MemTotal:        8046524 kB\n"
pcidev $R pci0000:00/0000:00:03.0 0x020000 0x8086 0x10d3 -1 0-3 e1000e
mkdir -p $R/sys/bus/pci/devices; ln -s ../../../devices/pci0000:00/0000:00:04.0 $R/sys/bus/pci/devices/0000:00:04.0
mkdir -p $R/sys/devices/virtual/net/eth1 $R/sys/class/net; ln -s ../../devices/virtual/net/eth1 $R/sys/class/net/eth1
w $R/sys/devices/virtual/net/eth1/type "1\n"; ln -s ../../../pci0000:00/0000:00:05.0 $R/sys/devices/virtual/net/eth1/device

# The bonding driver's file among the interfaces.
printf 'bond0\n' > two-numa/sys/class/net/bonding_masters
# git keeps no empty directories; sysfs has a uevent file in nearly every one.
find two-numa no-numa memory-tier offline-cpus numa-inference malformed-cpulist truncated-meminfo dangling-symlink -type d -empty -exec touch {}/uevent \;
