#!/bin/bash
# Builds the node tree the unit tests read: sysfs and procfs of devices of every kind
# that has device nodes, the host's /dev with those nodes (as plain files), and CDI
# specs. Run from this directory; the tree is committed.
set -e
cd "$(dirname "$0")"
R=node; rm -rf $R
w() { mkdir -p "$(dirname "$1")"; printf '%b' "$2" > "$1"; }
link() { mkdir -p "$(dirname "$2")"; ln -s "$(realpath -m --relative-to="$(dirname "$2")" "$1")" "$2"; } # target linkname
pci() { # addr driver
  local d=$R/sys/devices/pci0000:00/$1
  w $d/uevent ""; link $d $R/sys/bus/pci/devices/$1
  mkdir -p $R/sys/bus/pci/drivers/$2; link $R/sys/bus/pci/drivers/$2 $d/driver
}
dev() { for f in "$@"; do w $R/dev/$f ""; done; }
D=$R/sys/devices/pci0000:00

# Two NVIDIA GPUs (minors 0 and 1) with nvidia-drm render nodes.
pci 0000:3b:00.0 nvidia; w $D/0000:3b:00.0/drm/renderD128/dev "226:128\n"
w $R/proc/driver/nvidia/gpus/0000:3b:00.0/information "Model: \t\t NVIDIA A100\nIRQ:   \t\t 90\nDevice Minor: \t 0\nBus Location: \t 0000:3b:00.0\n"
pci 0000:af:00.0 nvidia
w $R/proc/driver/nvidia/gpus/0000:af:00.0/information "Model: \t\t NVIDIA A100\nDevice Minor: \t 1\n"
dev nvidia0 nvidia1 nvidiactl nvidia-uvm dri/renderD128
# An AMD GPU whose render node is missing from /dev: nothing to hand out, no /dev/kfd.
pci 0000:86:00.0 amdgpu; w $D/0000:86:00.0/drm/renderD129/dev "226:129\n"; w $D/0000:86:00.0/drm/card1/dev "226:1\n"
dev kfd
# A NIC bound to vfio-pci in IOMMU group 42, and its sibling function with RDMA verbs.
pci 0000:5e:00.0 vfio-pci
mkdir -p $R/sys/kernel/iommu_groups/42; link $R/sys/kernel/iommu_groups/42 $D/0000:5e:00.0/iommu_group
pci 0000:5e:00.1 mlx5_core; w $D/0000:5e:00.1/infiniband_verbs/uverbs0/dev "231:192\n"
dev vfio/42 vfio/vfio infiniband/uverbs0 infiniband/rdma_cm
# An NVMe drive: controller, namespace, partition, generic namespace, and a multipath
# controller path that has no node.
N=$D/0000:d8:00.0/nvme/nvme1
pci 0000:d8:00.0 nvme; w $N/dev "240:1\n"; w $N/nvme1n1/dev "259:0\n"; w $N/nvme1n1/nvme1n1p1/dev "259:1\n"
w $N/ng1n1/dev "241:0\n"; w $N/nvme1c1n1/uevent ""
dev nvme1 nvme1n1 nvme1n1p1 ng1n1
# An accelerator.
pci 0000:9a:00.0 habanalabs; w $D/0000:9a:00.0/accel/accel0/dev "261:0\n"
dev accel/accel0
# A device without any node.
pci 0000:00:1f.0 lpc_ich

# CDI specs: NVIDIA's (by device node, with an "all" device that must not match), one
# naming a device by its PCI address, one by an annotation, and one that does not parse.
w $R/etc/cdi/nvidia.yaml 'cdiVersion: "0.6.0"
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/dri/renderD128
- name: "1"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia1
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/nvidia1
containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
'
w $R/var/run/cdi/example-nic.json '{"cdiVersion":"0.6.0","kind":"example.com/nic","devices":[{"name":"0000:5e:00.0","containerEdits":{"env":["X=1"]}}]}'
w $R/var/run/cdi/example-accel.json '{"cdiVersion":"0.6.0","kind":"example.com/accel","devices":[{"name":"card-a","annotations":{"pci.address":"0000:9a:00.0"},"containerEdits":{}}]}'
w $R/var/run/cdi/broken.json '{"kind": '
w $R/var/run/cdi/README "not a spec\n"
