package heartbeat

// A Listener is told of each change the Store makes to a node's record, after the record
// holds it, on the watch's goroutine (keep it short). This is how the plugins learn of
// new heartbeats: kube-scheduler does not watch them itself, so that each kind is
// watched once and a pod brought back for a report is always checked against it.
type Listener struct {
	// Bandwidth gets the node's new report, or nil when the node no longer has a usable
	// one (deleted, rejected).
	Bandwidth func(node string, report *Bandwidth)
	// Topology is called when the node's NodeTopology was added, replaced or removed.
	Topology func(node string)
}

// AddListener registers l; it hears of changes from then on.
func (s *Store) AddListener(l Listener) {
	for {
		cur := s.listeners.Load()
		var next []Listener
		if cur != nil {
			next = append(next, *cur...)
		}
		next = append(next, l)
		if s.listeners.CompareAndSwap(cur, &next) {
			return
		}
	}
}

func (s *Store) tellBandwidth(node string, b *Bandwidth) {
	if ls := s.listeners.Load(); ls != nil {
		for _, l := range *ls {
			if l.Bandwidth != nil {
				l.Bandwidth(node, b)
			}
		}
	}
}

func (s *Store) tellTopology(node string) {
	if ls := s.listeners.Load(); ls != nil {
		for _, l := range *ls {
			if l.Topology != nil {
				l.Topology(node)
			}
		}
	}
}
