#!/bin/bash
# Builds the host tree the unit tests read: NICs behind the default routes (directly,
# through a bond, through a bridge on a VLAN), a NIC carrying a node address, drives
# backing mounts (directly, through LVM, through btrfs's anonymous device number) and
# swap, and devices that are free. Run from this directory; the tree is committed.
set -e
cd "$(dirname "$0")"
R=host; rm -rf $R
w() { mkdir -p "$(dirname "$1")"; printf '%b' "$2" > "$1"; }
rel() { realpath -m --relative-to="$(dirname "$2")" "$1"; }
link() { mkdir -p "$(dirname "$2")"; ln -s "$(rel "$1" "$2")" "$2"; } # target linkname
pci() { # addr
  local d=$R/sys/devices/pci0000:00/$1
  w $d/uevent ""; link $d $R/sys/bus/pci/devices/$1
}
nic() { # addr ifname
  local d=$R/sys/devices/pci0000:00/$1/net/$2
  pci $1; w $d/type "1\n"; link $R/sys/devices/pci0000:00/$1 $d/device; link $d $R/sys/class/net/$2
}
vnic() { # ifname lower...
  local d=$R/sys/devices/virtual/net/$1 n=$1; shift
  w $d/type "1\n"; link $d $R/sys/class/net/$n
  for l in "$@"; do link $(realpath -m $R/sys/class/net/$l) $d/lower_$l; done
}
disk() { # addr ctrl ns major:minor [partition major:minor]
  local d=$R/sys/devices/pci0000:00/$1/nvme/$2/$3
  pci $1; w $d/dev "$4\n"; link $d $R/sys/dev/block/$4; link $d $R/sys/class/block/$3
  if [ -n "$5" ]; then
    w $d/${3}p1/dev "$6\n"; w $d/${3}p1/partition "1\n"
    link $d/${3}p1 $R/sys/dev/block/$6; link $d/${3}p1 $R/sys/class/block/${3}p1
  fi
}

nic 0000:02:00.0 eth0           # IPv4 default route
nic 0000:03:00.0 eth1           # under bond0, which carries the node's address 10.1.0.5
nic 0000:03:00.1 eth2           # free
nic 0000:04:00.0 ens4           # under VLAN ens4.100 under bridge br0: IPv6 default route
nic 0000:04:00.1 ens5           # carries the node's IPv6 address
vnic bond0 eth1
vnic ens4.100 ens4
vnic br0
mkdir -p $R/sys/devices/virtual/net/br0/brif; ln -s ../../ens4.100 $R/sys/devices/virtual/net/br0/brif/ens4.100
vnic lo
w $R/sys/devices/virtual/net/lo/type "772\n"

disk 0000:05:00.0 nvme0 nvme0n1 259:0 p 259:1    # / on nvme0n1p1
disk 0000:06:00.0 nvme1 nvme1n1 259:2 p 259:3    # LVM: dm-0 on nvme1n1p1, at /var/lib/containerd
disk 0000:07:00.0 nvme2 nvme2n1 259:4            # swap
disk 0000:08:00.0 nvme3 nvme3n1 259:5            # btrfs at /data (agent's mounts only)
disk 0000:09:00.0 nvme4 nvme4n1 259:6            # free
pci 0000:81:00.0                                 # a GPU, free
d=$R/sys/devices/virtual/block/dm-0
w $d/dev "253:0\n"; w $d/dm/name "vg-containerd\n"
link $d $R/sys/dev/block/253:0; link $d $R/sys/class/block/dm-0
link $R/sys/devices/pci0000:00/0000:06:00.0/nvme/nvme1/nvme1n1/nvme1n1p1 $d/slaves/nvme1n1p1

w $R/proc/net/route "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
eth0\t00000000\t0100000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
eth0\t0000000A\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n\
bond0\t0000010A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n\
eth2\t0000020A\t00000000\t0201\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
w $R/proc/net/ipv6_route "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003      br0\n\
20010db8000000010000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     ens5\n\
00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n"
w $R/proc/net/if_inet6 "20010db8000000010000000000000005 03 40 00 80     ens5\n00000000000000000000000000000001 01 80 10 80       lo\n"
w $R/proc/1/mountinfo "22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw\n\
30 22 253:0 / /var/lib/containerd rw,relatime shared:2 - xfs /dev/mapper/vg-containerd rw\n\
32 22 0:21 / /proc rw,nosuid shared:3 - proc proc rw\n\
33 22 0:5 / /dev rw,nosuid shared:4 - devtmpfs udev rw\n\
40 22 0:50 / /run rw shared:5 - tmpfs tmpfs rw\n"
w $R/proc/self/mountinfo "1200 1100 0:45 / /host/data\\\\040dir rw,relatime - btrfs /dev/nvme3n1 rw\n\
1201 1100 0:60 / / rw - overlay overlay rw,lowerdir=/a\n"
w $R/proc/swaps "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n/dev/nvme2n1                            partition\t8388604\t\t0\t\t-2\n"
