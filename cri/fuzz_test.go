package cri

import (
	"testing"
)

// FuzzResourcesFromInfo: the verbose container info comes from the runtime, as JSON of
// its own making. Whatever it holds, reading the resources out of it never panics, and
// either fails or gives resources.
func FuzzResourcesFromInfo(f *testing.F) {
	for _, s := range []string{
		`{"runtimeSpec":{"process":{"oomScoreAdj":-997},"linux":{"resources":{"cpu":{"shares":2,"quota":50000,"period":100000,"cpus":"0-1","mems":"0"},` +
			`"memory":{"limit":1073741824,"swap":1073741824},"hugepageLimits":[{"pageSize":"2MB","limit":0}],"unified":{"memory.high":"max"}}}}}`,
		`{"runtimeSpec":{}}`, `{"runtimeSpec":{"linux":{}}}`, `{}`, `null`, ``, `[]`, `{"runtimeSpec":null}`,
		`{"runtimeSpec":{"linux":{"resources":{"cpu":{"shares":-1}}}}}`, `{"runtimeSpec":{"linux":{"resources":{"cpu":{"shares":18446744073709551615}}}}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, info string) {
		res, err := resourcesFromInfo(info)
		if err == nil && res == nil {
			t.Fatalf("resourcesFromInfo(%q): no resources and no error", info)
		}
	})
}
