package cri

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	containersapi "github.com/containerd/containerd/api/services/containers/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// recordStore is containerd's container service over a fixed list, applying no filter
// itself: it records the filters asked for.
type recordStore struct {
	containersapi.UnimplementedContainersServer
	list    []*containersapi.Container
	filters chan []string
}

func (r *recordStore) List(_ context.Context, req *containersapi.ListContainersRequest) (*containersapi.ListContainersResponse, error) {
	r.filters <- req.Filters
	return &containersapi.ListContainersResponse{Containers: r.list}, nil
}

func TestContainerRecords(t *testing.T) {
	created := time.Unix(1_763_805_600, 0)
	md := func(js string) map[string]*anypb.Any {
		return map[string]*anypb.Any{criMetadataKey: {TypeUrl: "github.com/containerd/cri/pkg/store/container/Metadata", Value: []byte(js)}}
	}
	store := &recordStore{filters: make(chan []string, 1), list: []*containersapi.Container{
		{ID: "c1", CreatedAt: timestamppb.New(created),
			Labels:     map[string]string{LabelPodUID: "uid", LabelContainerName: "proxy", StopMarkLabel: "v2:c1:1:30"},
			Extensions: md(`{"Version":"v1","Metadata":{"Config":{"metadata":{"name":"proxy","attempt":2}},"StopSignal":"SIGQUIT"}}`)},
		// A record the agent cannot read: no attempt, no stop signal (the stop then goes
		// through the CRI), but the container is still listed.
		{ID: "c2", Labels: map[string]string{LabelPodUID: "uid", LabelContainerName: "main"}, Extensions: md(`{"Version":"v9"}`)},
	}}
	sock := shortSocket(t)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("unix socket: %v", err)
	}
	srv := grpc.NewServer()
	containersapi.RegisterContainersServer(srv, store)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	c, err := Dial(sock, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	got, err := c.ContainerRecords(context.Background(), "uid")
	if err != nil {
		t.Fatal(err)
	}
	want := []Container{
		{ID: "c1", PodUID: "uid", Name: "proxy", Attempt: 2, State: StateUnknown, CreatedAt: created, StopMark: "v2:c1:1:30", StopSignal: "SIGQUIT"},
		{ID: "c2", PodUID: "uid", Name: "main", State: StateUnknown},
	}
	if !slices.EqualFunc(got, want, func(a, b Container) bool {
		return a.CreatedAt.Equal(b.CreatedAt) && a.StopMark == b.StopMark && a.ID == b.ID && a.Name == b.Name && a.Attempt == b.Attempt && a.StopSignal == b.StopSignal && a.State == b.State && a.PodUID == b.PodUID
	}) {
		t.Errorf("ContainerRecords = %+v, want %+v", got, want)
	}
	// One filter: the pod's containers, not its sandbox (which has the pod's label too).
	if f := <-store.filters; len(f) != 1 || f[0] != `labels."io.kubernetes.pod.uid"=="uid",labels."io.cri-containerd.kind"=="container"` {
		t.Errorf("filters %q, want the pod's UID and the container kind in one", f)
	}
}
