package sidecar

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// A stop mark is what the terminator writes on a container (cri.Runtime.MarkStop)
// before it stops it, and again once it recorded the stop. It is the agent's memory
// across restarts: a container with a mark is being, or was, stopped by an agent, so a
// new agent never signals it a second time; it only finishes the job (waits out the
// grace period the first stop gave, records the event once).
type stopMark struct {
	Requested time.Time
	Grace     time.Duration
	Recorded  bool
}

const markVersion = "v1"

// maxGraceSeconds is the longest grace period a time.Duration holds, in seconds.
const maxGraceSeconds = int64(math.MaxInt64 / time.Second)

func (m stopMark) String() string {
	s := fmt.Sprintf("%s:%d:%d", markVersion, m.Requested.UnixNano(), int64(m.Grace/time.Second))
	if m.Recorded {
		s += ":recorded"
	}
	return s
}

func parseStopMark(s string) (stopMark, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 3 || parts[0] != markVersion {
		return stopMark{}, fmt.Errorf("stop mark %q: want %s:<unix nanoseconds>:<grace seconds>[:recorded]", s, markVersion)
	}
	ns, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return stopMark{}, fmt.Errorf("stop mark %q: time: %w", s, err)
	}
	grace, err := strconv.ParseInt(parts[2], 10, 64)
	// Beyond what a time.Duration holds it would wrap negative: a stop with no grace
	// at all, the kill a sidecar that is a regular container fails its pod with.
	if err != nil || grace < 0 || grace > maxGraceSeconds {
		return stopMark{}, fmt.Errorf("stop mark %q: grace seconds: bad value", s)
	}
	m := stopMark{Requested: time.Unix(0, ns), Grace: time.Duration(grace) * time.Second}
	if len(parts) > 3 {
		if len(parts) != 4 || parts[3] != "recorded" {
			return stopMark{}, fmt.Errorf("stop mark %q: unknown suffix", s)
		}
		m.Recorded = true
	}
	return m, nil
}
