package cri

import (
	"context"
	"encoding/json"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerResources returns the Linux resources the runtime applies to the container:
// the CRI status's own where the runtime fills them in (containerd 1.7 and later), else
// those of the OCI spec in the verbose status (containerd 1.6).
func (c *Client) ContainerResources(ctx context.Context, id string) (*runtimeapi.LinuxContainerResources, error) {
	resp, err := c.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return nil, fmt.Errorf("status of container %s: %w", id, err)
	}
	if s := resp.GetStatus(); s != nil && s.GetResources().GetLinux() != nil {
		return s.GetResources().GetLinux(), nil
	}
	info, ok := resp.GetInfo()["info"]
	if !ok {
		return nil, fmt.Errorf("status of container %s: the runtime reports neither resources nor a verbose spec", id)
	}
	return resourcesFromInfo(info)
}

// UpdateCpuset asks the runtime to run the container on cpus and take memory from mems
// (cgroup list format, "0-3,8"), keeping every other resource as the kubelet set it. The
// runtime records the new set in the container's spec, so a later update by the kubelet
// (an in-place resize) that leaves the cpuset empty keeps it.
func (c *Client) UpdateCpuset(ctx context.Context, id, cpus, mems string) error {
	res, err := c.ContainerResources(ctx, id)
	if err != nil {
		return err
	}
	res.CpusetCpus, res.CpusetMems = cpus, mems
	if _, err := c.runtime.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: res}); err != nil {
		return fmt.Errorf("update the cpuset of container %s to cpus %s mems %s: %w", id, cpus, mems, err)
	}
	return nil
}

// ociInfo is the part of containerd's verbose container info that holds the OCI spec's
// resources: only the fields the CRI's LinuxContainerResources carries.
type ociInfo struct {
	RuntimeSpec *struct {
		Process *struct {
			OOMScoreAdj *int64 `json:"oomScoreAdj"`
		} `json:"process"`
		Linux *struct {
			Resources *struct {
				CPU *struct {
					Shares *uint64 `json:"shares"`
					Quota  *int64  `json:"quota"`
					Period *uint64 `json:"period"`
					Cpus   string  `json:"cpus"`
					Mems   string  `json:"mems"`
				} `json:"cpu"`
				Memory *struct {
					Limit *int64 `json:"limit"`
					Swap  *int64 `json:"swap"`
				} `json:"memory"`
				HugepageLimits []struct {
					Pagesize string `json:"pageSize"`
					Limit    uint64 `json:"limit"`
				} `json:"hugepageLimits"`
				Unified map[string]string `json:"unified"`
			} `json:"resources"`
		} `json:"linux"`
	} `json:"runtimeSpec"`
}

func resourcesFromInfo(info string) (*runtimeapi.LinuxContainerResources, error) {
	var oi ociInfo
	if err := json.Unmarshal([]byte(info), &oi); err != nil {
		return nil, fmt.Errorf("decode the runtime's verbose container info: %w", err)
	}
	spec := oi.RuntimeSpec
	if spec == nil {
		return nil, fmt.Errorf("the runtime's verbose container info has no runtimeSpec")
	}
	res := &runtimeapi.LinuxContainerResources{}
	if spec.Process != nil && spec.Process.OOMScoreAdj != nil {
		res.OomScoreAdj = *spec.Process.OOMScoreAdj
	}
	if spec.Linux == nil || spec.Linux.Resources == nil {
		return res, nil
	}
	r := spec.Linux.Resources
	if cpu := r.CPU; cpu != nil {
		if cpu.Shares != nil {
			res.CpuShares = int64(*cpu.Shares)
		}
		if cpu.Quota != nil {
			res.CpuQuota = *cpu.Quota
		}
		if cpu.Period != nil {
			res.CpuPeriod = int64(*cpu.Period)
		}
		res.CpusetCpus, res.CpusetMems = cpu.Cpus, cpu.Mems
	}
	if mem := r.Memory; mem != nil {
		if mem.Limit != nil {
			res.MemoryLimitInBytes = *mem.Limit
		}
		if mem.Swap != nil {
			res.MemorySwapLimitInBytes = *mem.Swap
		}
	}
	for _, h := range r.HugepageLimits {
		res.HugepageLimits = append(res.HugepageLimits, &runtimeapi.HugepageLimit{PageSize: h.Pagesize, Limit: h.Limit})
	}
	res.Unified = r.Unified
	return res, nil
}

// ContainerCpuset returns the cpuset the runtime's record of the container holds, in
// cgroup list format; empty where the container inherits its pod's.
func (c *Client) ContainerCpuset(ctx context.Context, id string) (cpus, mems string, err error) {
	res, err := c.ContainerResources(ctx, id)
	if err != nil {
		return "", "", err
	}
	return res.GetCpusetCpus(), res.GetCpusetMems(), nil
}
