package sidecar

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"sextant.io/sextant/api/sidecarrules"
)

// A stop mark is what the terminator writes on a container (cri.Runtime.MarkStop)
// before it stops it, and again once it recorded the stop. It is the agent's memory
// across restarts: a container with a mark is being, or was, stopped by an agent, so a
// new agent never signals it a second time; it only finishes the job (waits out the
// grace period the first stop gave, records the event once).
//
// The mark is a containerd label, and containerd copies an image's labels into the
// labels of the containers made from it: an image can carry a mark, one that would have
// the agent kill its sidecar while the main containers run, or never stop it. So a mark
// names the container it was written on, whose ID no image can know beforehand, and a
// mark naming another container (or none) is no mark.
type stopMark struct {
	// ID is the container the mark is about.
	ID        string
	Requested time.Time
	Grace     time.Duration
	Recorded  bool
}

// markVersion is the form of the marks this agent writes and reads, the one that names
// the container. A mark of another form is not read: an image can carry one as well,
// and nothing tells one an agent wrote from one it did not. So a sidecar an agent
// writing another form was stopping is stopped again (a second SIGTERM, to a container
// on its way out), and one it stopped but did not record is not recorded.
const markVersion = "v2"

// maxGraceSeconds is the longest grace period a mark may hold; the rules never give a
// longer one.
const maxGraceSeconds = int64(sidecarrules.MaxGracePeriod / time.Second)

func (m stopMark) String() string {
	s := fmt.Sprintf("%s:%s:%d:%d", markVersion, m.ID, m.Requested.UnixNano(), int64(m.Grace/time.Second))
	if m.Recorded {
		s += ":recorded"
	}
	return s
}

// parseStopMark reads the mark found on container id; one written on another container
// is an error.
func parseStopMark(s, id string) (stopMark, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 4 || parts[0] != markVersion {
		return stopMark{}, fmt.Errorf("stop mark %q: want %s:<container ID>:<unix nanoseconds>:<grace seconds>[:recorded]", s, markVersion)
	}
	if parts[1] == "" || parts[1] != id {
		return stopMark{}, fmt.Errorf("stop mark %q: not written on container %s", s, id)
	}
	ns, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return stopMark{}, fmt.Errorf("stop mark %q: time: %w", s, err)
	}
	grace, err := strconv.ParseInt(parts[3], 10, 64)
	// Outside what the rules give, it was not written by an agent; beyond what a
	// time.Duration holds it would wrap negative: a stop with no grace at all, the kill
	// a sidecar that is a regular container fails its pod with.
	minGrace := int64(sidecarrules.MinGracePeriod / time.Second)
	if err != nil || grace < minGrace || grace > maxGraceSeconds {
		return stopMark{}, fmt.Errorf("stop mark %q: grace seconds: want %d to %d", s, minGrace, maxGraceSeconds)
	}
	m := stopMark{ID: id, Requested: time.Unix(0, ns), Grace: time.Duration(grace) * time.Second}
	if len(parts) > 4 {
		if len(parts) != 5 || parts[4] != "recorded" {
			return stopMark{}, fmt.Errorf("stop mark %q: unknown suffix", s)
		}
		m.Recorded = true
	}
	return m, nil
}
