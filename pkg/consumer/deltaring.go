package consumer

import (
	"time"
)

// outstandingDelta is one admitted, not yet applied delta.
type outstandingDelta struct {
	id          uint64
	images      uint64
	submittedAt time.Time
	// installMark is the worker's install time (worker.installTime) at
	// submission: what it adds later is time the delta waited behind
	// snapshot installs, which its lag does not count.
	installMark int64
}

// deltaRing is a FIFO of outstanding deltas that reuses its backing array.
type deltaRing struct {
	buf  []outstandingDelta
	head int
	n    int
}

func (r *deltaRing) push(d outstandingDelta) {
	if r.n == len(r.buf) {
		grown := make([]outstandingDelta, max(2*len(r.buf), 8))
		for i := range r.n {
			grown[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = grown, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = d
	r.n++
}

func (r *deltaRing) front() (outstandingDelta, bool) {
	if r.n == 0 {
		return outstandingDelta{}, false
	}
	return r.buf[r.head], true
}

func (r *deltaRing) at(i int) *outstandingDelta { return &r.buf[(r.head+i)%len(r.buf)] }

// remove drops the entry with id and returns its image count. FIFO
// completion pops the head and a failed enqueue pops the tail; other
// positions arise only on teardown, so that path may shift.
func (r *deltaRing) remove(id uint64) (uint64, bool) {
	switch {
	case r.n == 0:
		return 0, false
	case r.at(0).id == id:
		images := r.at(0).images
		r.head = (r.head + 1) % len(r.buf)
		r.n--
		return images, true
	case r.at(r.n-1).id == id:
		images := r.at(r.n - 1).images
		r.n--
		return images, true
	}
	for i := 1; i < r.n-1; i++ {
		if r.at(i).id != id {
			continue
		}
		images := r.at(i).images
		for j := i; j < r.n-1; j++ {
			*r.at(j) = *r.at(j + 1)
		}
		r.n--
		return images, true
	}
	return 0, false
}
