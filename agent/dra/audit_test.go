package dra

import (
	"errors"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

func TestCompare(t *testing.T) {
	cl := claim("uid-1", result{request: "r", pool: "node-a", device: "gpu-a"}, result{request: "r", pool: "node-a", device: "gpu-b"},
		result{request: "x", pool: "node-a", device: "nic-x", driver: "net.example.com"})
	claims := func(ns, name string) (*resourceapi.ResourceClaim, error) {
		if name == cl.Name {
			return cl, nil
		}
		return nil, errors.New("not found")
	}
	res := func(driver, dev string, cdi ...string) *podresourcesapi.ClaimResource {
		r := &podresourcesapi.ClaimResource{DriverName: driver, PoolName: "node-a", DeviceName: dev}
		for _, c := range cdi {
			r.CdiDevices = append(r.CdiDevices, &podresourcesapi.CDIDevice{Name: c})
		}
		return r
	}
	pod := func(claim string, rs ...*podresourcesapi.ClaimResource) []*podresourcesapi.PodResources {
		return []*podresourcesapi.PodResources{{Namespace: "ns", Name: "p", Containers: []*podresourcesapi.ContainerResources{{
			Name: "c", DynamicResources: []*podresourcesapi.DynamicResource{{ClaimName: claim, ClaimNamespace: "ns", ClaimResources: rs}},
		}}}}
	}
	ours := func(dev string) string { return qualified(cdiName("uid-1", dev)) }
	for _, tc := range []struct {
		name string
		list []*podresourcesapi.PodResources
		want []string // containers' claims that mismatch, with what is missing
	}{
		{"as allocated, with the CDI devices", pod(cl.Name, res(DriverName, "gpu-a", ours("gpu-a")), res(DriverName, "gpu-b", ours("gpu-b"), "nvidia.com/gpu=1"),
			res("net.example.com", "nic-x")), nil},
		{"part of the claim", pod(cl.Name, res(DriverName, "gpu-a", ours("gpu-a"))), nil},
		{"a device not allocated", pod(cl.Name, res(DriverName, "gpu-a", ours("gpu-a")), res(DriverName, "gpu-z", ours("gpu-z"))), []string{"c/" + cl.Name}},
		{"without the driver's CDI device", pod(cl.Name, res(DriverName, "gpu-a"), res(DriverName, "gpu-b", ours("gpu-b"))), []string{"c/" + cl.Name + " missing " + ours("gpu-a")}},
		{"a claim that is gone", pod("gone", res(DriverName, "gpu-z")), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, m := range Compare(tc.list, claims) {
				s := m.Container + "/" + m.Claim
				if len(m.MissingCDI) > 0 {
					s += " missing " + m.MissingCDI[0]
				}
				got = append(got, s)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Compare = %v, want %v", got, tc.want)
			}
		})
	}
}
