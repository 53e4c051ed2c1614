package podresources

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

type fakeKubelet struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	cpus    []int64
	memory  []*podresourcesapi.ContainerMemory
	devices []*podresourcesapi.ContainerDevices
	pods    []*podresourcesapi.PodResources
}

func (f *fakeKubelet) GetAllocatableResources(context.Context, *podresourcesapi.AllocatableResourcesRequest) (*podresourcesapi.AllocatableResourcesResponse, error) {
	return &podresourcesapi.AllocatableResourcesResponse{CpuIds: f.cpus, Memory: f.memory, Devices: f.devices}, nil
}

func (f *fakeKubelet) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	return &podresourcesapi.ListPodResourcesResponse{PodResources: f.pods}, nil
}

func serve(t *testing.T, f *fakeKubelet) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, f)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return sock
}

func TestStaticManagers(t *testing.T) {
	block := []*podresourcesapi.ContainerMemory{{MemoryType: "memory", Size: 1 << 30,
		Topology: &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: 0}}}}}
	for _, c := range []struct {
		cpus            []int64
		memory          []*podresourcesapi.ContainerMemory
		wantCPU, wantMe bool
	}{{nil, nil, false, false}, {[]int64{1, 2, 3}, nil, true, false}, {nil, block, false, true}, {[]int64{1}, block, true, true}} {
		c2, err := Dial(serve(t, &fakeKubelet{cpus: c.cpus, memory: c.memory}))
		if err != nil {
			t.Fatal(err)
		}
		cpu, mem, err := c2.StaticManagers(context.Background())
		_ = c2.Close()
		if err != nil || cpu != c.wantCPU || mem != c.wantMe {
			t.Errorf("allocatable CPUs %v, %d memory blocks: static CPU %v, memory %v, %v; want %v, %v", c.cpus, len(c.memory), cpu, mem, err, c.wantCPU, c.wantMe)
		}
	}
	c3, _ := Dial(filepath.Join(t.TempDir(), "missing.sock"))
	defer c3.Close()
	if _, _, err := c3.StaticManagers(context.Background()); err == nil {
		t.Error("no kubelet: no error")
	}
}

func TestListAndDeviceResources(t *testing.T) {
	f := &fakeKubelet{
		devices: []*podresourcesapi.ContainerDevices{
			{ResourceName: "sextant.io/gpu", DeviceIds: []string{"0000:3b:00.0"}},
			{ResourceName: "sextant.io/gpu", DeviceIds: []string{"0000:3c:00.0"}},
			{ResourceName: "example.com/fpga", DeviceIds: []string{"f0"}},
		},
		pods: []*podresourcesapi.PodResources{{Name: "p", Namespace: "ns", Containers: []*podresourcesapi.ContainerResources{{Name: "c"}}}},
	}
	c, err := Dial(serve(t, f))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.DeviceResources(context.Background())
	if err != nil || len(got) != 2 || !got["sextant.io/gpu"] || !got["example.com/fpga"] {
		t.Errorf("DeviceResources = %v, %v", got, err)
	}
	devs, err := c.AllocatableDevices(context.Background())
	if err != nil || len(devs["sextant.io/gpu"]) != 2 || len(devs["example.com/fpga"]) != 1 {
		t.Errorf("AllocatableDevices = %v, %v", devs, err)
	}
	pods, err := c.List(context.Background())
	if err != nil || len(pods) != 1 || pods[0].GetName() != "p" {
		t.Errorf("List = %v, %v", pods, err)
	}
}

// A kubelet that accepts the connection and never answers fails the call by the client's
// timeout: the loops asking it retry instead of hanging.
func TestHungKubeletTimesOut(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never read or written
		}
	}()
	c, err := Dial(sock, WithTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		_, err := c.List(context.Background())
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a kubelet that never answers: List returned no error")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("List still waiting on a kubelet that never answers after 30s (timeout 200ms)")
	}
}
