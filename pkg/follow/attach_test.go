package follow

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// recordingAttachment notes what the service did with it, in order.
type recordingAttachment struct {
	mu    sync.Mutex
	calls []string
	s     *Service
}

func (a *recordingAttachment) note(c string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, c)
}

func (a *recordingAttachment) Start() error { a.note("start"); return nil }

func (a *recordingAttachment) Stop() error {
	// shutdown sets closing, then waits for the runners, then stops us.
	a.s.mu.Lock()
	closing := a.s.closing
	a.s.mu.Unlock()
	if closing {
		a.note("stop after runners")
	} else {
		a.note("stop")
	}
	return nil
}

// Config.Attach is built once by New with the service and its registerer,
// started by Run and stopped after the lane runners, before Run returns.
func TestAttachmentIsBuiltStartedAndStoppedByTheService(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(3, 2, 4)
	feed(r, w, func(int) int { return 4 })
	var a *recordingAttachment
	built := 0
	cfg := testConfig(t)
	cfg.Attach = func(s *Service, reg prometheus.Registerer) (Attachment, error) {
		built++
		if reg == nil {
			t.Error("Attach got no registerer")
		}
		a = &recordingAttachment{s: s}
		return a, nil
	}
	s := startService(t, e.nc, e.js, cfg)
	if built != 1 || a.s != s.Service {
		t.Fatalf("Attach called %d times, service %p, want once with %p", built, a.s, s.Service)
	}
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	s.stop(t)
	a.mu.Lock()
	defer a.mu.Unlock()
	if strings.Join(a.calls, ",") != "start,stop after runners" {
		t.Fatalf("calls %q, want start, then stop once the runners were closing", a.calls)
	}
}

// An Attach that fails fails New with ErrInvalidConfig, naming it.
func TestAttachFailureFailsNew(t *testing.T) {
	e := newEnv(t)
	boom := errors.New("boom")
	cfg := testConfig(t)
	cfg.Attach = func(*Service, prometheus.Registerer) (Attachment, error) { return nil, boom }
	_, err := New(e.nc, e.js, cfg)
	var ie *Error
	if !errors.Is(err, ErrInvalidConfig) || !errors.Is(err, boom) || !errors.As(err, &ie) || ie.Field != "attach" {
		t.Fatalf("New = %v, want ErrInvalidConfig wrapping boom on field attach", err)
	}
}
