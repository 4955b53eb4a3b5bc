package relay

import (
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// TestSubjectWorkerCachesTheLastWorkers: interleaved subjects of up to
// subjectCacheSize workers are answered from the cache, with their own
// worker ids; the oldest is replaced first; a bad subject is refused and
// never cached.
func TestSubjectWorkerCachesTheLastWorkers(t *testing.T) {
	var e epochRun
	subj := func(w uint64) string {
		s, err := wire.WorkerEventsSubject("dom", "dc", w)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for round := range 3 {
		for w := uint64(1); w <= subjectCacheSize; w++ {
			got, err := e.subjectWorker(subj(w))
			if err != nil || got != w {
				t.Fatalf("round %d: worker %d parsed as %d, %v", round, w, got, err)
			}
			if c, ok := e.subjects.get(subj(w)); !ok || c != w {
				t.Fatalf("round %d: worker %d cached as %d, %v", round, w, c, ok)
			}
		}
	}
	if got, err := e.subjectWorker(subj(100)); err != nil || got != 100 {
		t.Fatalf("worker 100 parsed as %d, %v", got, err)
	}
	if _, ok := e.subjects.get(subj(1)); ok {
		t.Fatal("the oldest subject was kept past the cache's size")
	}
	for w := uint64(2); w <= subjectCacheSize; w++ {
		if c, ok := e.subjects.get(subj(w)); !ok || c != w {
			t.Fatalf("worker %d cached as %d, %v", w, c, ok)
		}
	}
	for _, bad := range []string{"", "not.a.worker.subject"} {
		if _, err := e.subjectWorker(bad); err == nil {
			t.Fatalf("subject %q accepted", bad)
		}
		if _, ok := e.subjects.get(bad); ok {
			t.Fatalf("subject %q cached", bad)
		}
	}
}
