package cyclestate

import (
	"sync"
	"testing"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

type data struct{ n int }

func (d *data) Clone() fwk.StateData { c := *d; return &c }

type other struct{}

func (other) Clone() fwk.StateData { return other{} }

const key fwk.StateKey = "test"

func TestReadReturnsWhatWasWritten(t *testing.T) {
	m := New[*data](key)
	a, b := framework.NewCycleState(), framework.NewCycleState()
	m.Write(a, &data{n: 1})
	m.Write(b, &data{n: 2})
	// b was written last; a is read from the state itself.
	for _, tc := range []struct {
		name  string
		state fwk.CycleState
		want  int
	}{{"last written", b, 2}, {"written before", a, 1}} {
		got, ok := m.Read(tc.state)
		if !ok || got.n != tc.want {
			t.Errorf("%s: Read = %+v, %v; want n=%d", tc.name, got, ok, tc.want)
		}
	}
}

// A clone is another state: it is read from itself, and a write to it leaves the
// original's data alone.
func TestClone(t *testing.T) {
	m := New[*data](key)
	orig := framework.NewCycleState()
	m.Write(orig, &data{n: 1})
	clone := orig.Clone()
	if got, ok := m.Read(clone); !ok || got.n != 1 {
		t.Fatalf("Read(clone) = %+v, %v; want n=1", got, ok)
	}
	m.Write(clone, &data{n: 3})
	if got, ok := m.Read(orig); !ok || got.n != 1 {
		t.Errorf("Read(orig) after writing the clone = %+v, %v; want n=1", got, ok)
	}
	if got, ok := m.Read(clone); !ok || got.n != 3 {
		t.Errorf("Read(clone) = %+v, %v; want n=3", got, ok)
	}
}

func TestReadMissing(t *testing.T) {
	m := New[*data](key)
	if _, ok := m.Read(nil); ok {
		t.Error("Read(nil) ok")
	}
	if _, ok := m.Read(framework.NewCycleState()); ok {
		t.Error("Read of a state without the key ok")
	}
	wrong := framework.NewCycleState()
	wrong.Write(key, other{})
	if _, ok := m.Read(wrong); ok {
		t.Error("Read of another type ok")
	}
}

// The last written state is answered from the Memo, not read again: a write around
// Write goes unseen (which is why every write must go through Write).
func TestReadAnswersFromMemo(t *testing.T) {
	m := New[*data](key)
	s := framework.NewCycleState()
	m.Write(s, &data{n: 1})
	s.Write(key, &data{n: 2})
	if got, _ := m.Read(s); got.n != 1 {
		t.Errorf("Read = %+v; want the remembered n=1", got)
	}
}

func TestConcurrent(t *testing.T) {
	m := New[*data](key)
	states := []fwk.CycleState{framework.NewCycleState(), framework.NewCycleState()}
	for i, s := range states {
		m.Write(s, &data{n: i})
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				s := states[(g+i)%2]
				if g == 0 && i%10 == 0 {
					m.Write(s, &data{n: (g + i) % 2})
				}
				if got, ok := m.Read(s); !ok || got.n != (g+i)%2 {
					t.Errorf("Read = %+v, %v; want n=%d", got, ok, (g+i)%2)
					return
				}
			}
		}()
	}
	wg.Wait()
}
