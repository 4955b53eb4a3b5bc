package replay

import (
	"strings"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

func TestLoadEmbeddedTrace(t *testing.T) {
	reqs, err := LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 12031 {
		t.Fatalf("requests = %d, want 12031", len(reqs))
	}
	for i, r := range reqs {
		if r.HashIDs[0] != 0 {
			t.Fatalf("request %d does not start with the system prompt block", i)
		}
	}
}

func TestReadTraceRejectsBadInput(t *testing.T) {
	for _, in := range []string{"", "{\"hash_ids\":[]}\n", "not json\n"} {
		if _, err := ReadTrace(strings.NewReader(in)); err == nil {
			t.Fatalf("accepted %q", in)
		}
	}
	if err := (Config{}).Validate(); err == nil {
		t.Fatal("empty config accepted")
	}
}

// TestReplayEventsAreConsistentWithTheCacheModel checks, for every worker,
// that Stored parents are cached, removals name cached blocks, and the
// per-DC ground truth equals the union of the worker caches.
func TestReplayEventsAreConsistentWithTheCacheModel(t *testing.T) {
	reqs, err := LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{DCs: []string{"a", "b", "c"}, WorkersPerDC: 4, CapacityBlocks: 512, Duplication: 1, Affinity: 0.7, Seed: 1}
	r, err := New(cfg, reqs[:3000])
	if err != nil {
		t.Fatal(err)
	}
	held := map[uint64]map[uint64]bool{} // worker -> engine hashes
	evictions, stores := 0, 0
	for {
		st, ok := r.Next()
		if !ok {
			break
		}
		h := held[st.Worker]
		if h == nil {
			h = map[uint64]bool{}
			held[st.Worker] = h
		}
		for _, ev := range st.Events {
			switch ev.Event.Data.Kind {
			case routerevent.EventRemoved:
				for _, x := range ev.Event.Data.Removed.BlockHashes {
					if !h[x] {
						t.Fatalf("step %d removes uncached %#x", st.Index, x)
					}
					delete(h, x)
					evictions++
				}
			case routerevent.EventStored:
				sd := ev.Event.Data.Stored
				if sd.ParentHash != nil && !h[*sd.ParentHash] {
					t.Fatalf("step %d: parent %#x not cached", st.Index, *sd.ParentHash)
				}
				for _, b := range sd.Blocks {
					h[b.BlockHash] = true
					stores++
				}
			}
		}
		seqs := ckf.SequenceHashes(nil, st.Locals)
		if d := r.Depth(st.DC, seqs); d != len(seqs) {
			t.Fatalf("step %d: serving DC depth %d, want %d", st.Index, d, len(seqs))
		}
		for dc, before := range st.DepthBefore {
			now := r.Depth(dc, seqs)
			if (dc == st.DC && before > now) || (dc != st.DC && before != now) {
				t.Fatalf("step %d dc %d: depth before %d, after %d", st.Index, dc, before, now)
			}
		}
	}
	if evictions == 0 || stores == 0 {
		t.Fatalf("evictions %d stores %d: the cache model never evicted", evictions, stores)
	}
	for dc := range cfg.DCs {
		total := 0
		for w := range cfg.WorkersPerDC {
			total += len(held[WorkerID(dc, w)])
		}
		if r.Blocks(dc) == 0 || r.Blocks(dc) > total {
			t.Fatalf("dc %d: %d distinct blocks vs %d held", dc, r.Blocks(dc), total)
		}
	}
}
