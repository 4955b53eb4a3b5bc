package api

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

func TestAppendJSONIsEncodingJSONByteForByte(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"dc-a", "", "d\"c", "a<b>&c", "ümlaut", "tab\there", "\u2028", "x\\y", "\x7f", string([]byte{0xff, 'a'})}
	cases := []MatchResponse{{}, {Lanes: []LaneDepth{}}}
	for range 500 {
		r := MatchResponse{ReadyLanes: uint16(rng.Uint32()), Blocks: rng.IntN(1 << 17), Lanes: []LaneDepth{}}
		for range rng.IntN(17) {
			r.Lanes = append(r.Lanes, LaneDepth{Lane: rng.IntN(16), DC: names[rng.IntN(len(names))],
				Pool: names[rng.IntN(len(names))], Depth: rng.Uint32(), AgeMs: rng.Int64N(1<<40) - 1, Stale: rng.IntN(3) == 0})
		}
		r.SetBest()
		cases = append(cases, r)
	}
	for _, r := range cases {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.AppendJSON(nil); string(got) != string(want) {
			t.Fatalf("AppendJSON\n%s\nencoding/json\n%s", got, want)
		}
	}
}

func TestAppendJSONAllocatesNothingIntoABuffer(t *testing.T) {
	r := MatchResponse{ReadyLanes: 3, Blocks: 128, Lanes: []LaneDepth{{Lane: 0, DC: "dc-a", Pool: "p/1", Depth: 4, AgeMs: 12}, {Lane: 1, DC: "dc-b", Pool: "p/2", Depth: 9, AgeMs: 9000, Stale: true}}}
	r.SetBest()
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() { buf = r.AppendJSON(buf[:0]) }); n != 0 {
		t.Fatalf("%v allocs per answer", n)
	}
}
