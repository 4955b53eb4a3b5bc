package lease

import (
	"encoding/json"
	"testing"
)

// FuzzLaneMapJSON: the stored lane-map decoder never panics, and an
// accepted map re-encodes to a form that decodes to the same map.
func FuzzLaneMapJSON(f *testing.F) {
	var m LaneMap
	seed, _ := json.Marshal(&m)
	f.Add(seed)
	f.Add([]byte(`{"format":1,"lanes":[]}`))
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
		for i := range got.Lanes {
			a, b := got.Lanes[i], again.Lanes[i]
			if (a == nil) != (b == nil) || (a != nil && (a.DcName != b.DcName || a.Pool != b.Pool || !a.RegisteredAt.Equal(b.RegisteredAt))) {
				t.Fatalf("lane %d changed: %+v → %+v", i, a, b)
			}
		}
	})
}
