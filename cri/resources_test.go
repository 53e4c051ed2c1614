package cri

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// containerd 1.6's verbose info of a Burstable container, trimmed to what matters.
const containerd16Info = `{"sandboxID":"9a8b","pid":4242,"runtimeSpec":{"ociVersion":"1.0.2-dev",
"process":{"args":["sleep","3600"],"oomScoreAdj":968},
"linux":{"resources":{"devices":[{"allow":false,"access":"rwm"}],
"memory":{"limit":268435456,"swap":268435456},
"cpu":{"shares":102,"quota":20000,"period":100000},
"hugepageLimits":[{"pageSize":"2MB","limit":0}]},
"cgroupsPath":"/kubepods/burstable/pod0b8c/4f1e"}}}`

func TestResourcesFromInfo(t *testing.T) {
	got, err := resourcesFromInfo(containerd16Info)
	if err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.LinuxContainerResources{
		CpuShares: 102, CpuQuota: 20000, CpuPeriod: 100000, MemoryLimitInBytes: 268435456,
		MemorySwapLimitInBytes: 268435456, OomScoreAdj: 968,
		HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 0}},
	}
	if !proto.Equal(got, want) {
		t.Errorf("resources = %v, want %v", got, want)
	}
	for _, bad := range []string{`{`, `{"sandboxID":"x"}`} {
		if _, err := resourcesFromInfo(bad); err == nil {
			t.Errorf("resourcesFromInfo(%q): no error", bad)
		}
	}
}

// fakeRuntime answers ContainerStatus and records UpdateContainerResources.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	status  *runtimeapi.ContainerStatusResponse
	updates []*runtimeapi.UpdateContainerResourcesRequest
}

func (f *fakeRuntime) ContainerStatus(context.Context, *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	return f.status, nil
}

func (f *fakeRuntime) UpdateContainerResources(_ context.Context, r *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	f.updates = append(f.updates, r)
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

func serveFake(t *testing.T, f *fakeRuntime) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, f)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	c, err := Dial(sock, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestUpdateCpusetKeepsTheRest(t *testing.T) {
	for name, status := range map[string]*runtimeapi.ContainerStatusResponse{
		"containerd 1.6 (verbose spec)": {Status: &runtimeapi.ContainerStatus{Id: "c1"}, Info: map[string]string{"info": containerd16Info}},
		"CRI resources": {Status: &runtimeapi.ContainerStatus{Id: "c1", Resources: &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{
			CpuShares: 102, CpuQuota: 20000, CpuPeriod: 100000, MemoryLimitInBytes: 268435456, MemorySwapLimitInBytes: 268435456, OomScoreAdj: 968,
			HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 0}}, CpusetCpus: "0-3"}}}},
	} {
		f := &fakeRuntime{status: status}
		c := serveFake(t, f)
		if err := c.UpdateCpuset(context.Background(), "c1", "1", "0"); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(f.updates) != 1 {
			t.Fatalf("%s: %d updates, want 1", name, len(f.updates))
		}
		want := &runtimeapi.UpdateContainerResourcesRequest{ContainerId: "c1", Linux: &runtimeapi.LinuxContainerResources{
			CpuShares: 102, CpuQuota: 20000, CpuPeriod: 100000, MemoryLimitInBytes: 268435456,
			MemorySwapLimitInBytes: 268435456, OomScoreAdj: 968, CpusetCpus: "1", CpusetMems: "0",
			HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 0}},
		}}
		if !proto.Equal(f.updates[0], want) {
			t.Errorf("%s: update %v, want %v", name, f.updates[0], want)
		}
	}
}
