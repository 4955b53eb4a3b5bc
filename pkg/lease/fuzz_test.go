package lease

import (
	"encoding/json"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// FuzzLaneMapJSON: the stored lane-map decoder never panics, and an
// accepted map re-encodes to a form that decodes to the same map, and it
// obeys only valid entries.
func FuzzLaneMapJSON(f *testing.F) {
	var m LaneMap
	seed, _ := json.Marshal(&m)
	f.Add(seed)
	f.Add([]byte(`{"format":1,"lanes":[]}`))
	m.Lanes[2] = &LaneEntry{DcName: "dc-a", Pool: ckf.PoolID{Dc: ckf.DcIDFromName("dc-a")}}
	m.Lanes[5] = &LaneEntry{DcName: "dc.b", Pool: ckf.PoolID{Dc: ckf.DcIDFromName("dc.b")}}
	withEntries, _ := json.Marshal(&m)
	f.Add(withEntries)
	f.Fuzz(func(t *testing.T, b []byte) {
		var got LaneMap
		if err := json.Unmarshal(b, &got); err != nil {
			return
		}
		out, err := json.Marshal(&got)
		if err != nil {
			t.Fatal(err)
		}
		var again LaneMap
		if err := json.Unmarshal(out, &again); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		// Only valid entries are obeyed, so a map written back holds no
		// entry a reader would refuse.
		if len(again.Rejected) != 0 {
			t.Fatalf("written back with refused entries: %v", again.Rejected)
		}
		seen := map[string]bool{}
		for i, e := range got.Lanes {
			if e == nil {
				continue
			}
			if ValidateName(e.DcName) != nil || e.Pool.Dc != ckf.DcIDFromName(e.DcName) || seen[e.DcName] {
				t.Fatalf("lane %d obeys an invalid entry %+v", i, e)
			}
			seen[e.DcName] = true
		}
		for i := range got.Lanes {
			a, b := got.Lanes[i], again.Lanes[i]
			if (a == nil) != (b == nil) || (a != nil && (a.DcName != b.DcName || a.Pool != b.Pool || !a.RegisteredAt.Equal(b.RegisteredAt))) {
				t.Fatalf("lane %d changed: %+v → %+v", i, a, b)
			}
		}
	})
}
