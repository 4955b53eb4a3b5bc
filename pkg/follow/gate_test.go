package follow

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// laneMsg is a lane message as the ordered consumer hands it over, without
// a server behind it (the gate never acknowledges anything).
type laneMsg struct {
	subject string
	data    []byte
	seq     uint64
}

func (m *laneMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: m.seq}}, nil
}
func (m *laneMsg) Data() []byte                       { return m.data }
func (m *laneMsg) Headers() nats.Header               { return nats.Header{} }
func (m *laneMsg) Subject() string                    { return m.subject }
func (m *laneMsg) Reply() string                      { return "" }
func (m *laneMsg) Ack() error                         { return nil }
func (m *laneMsg) DoubleAck(context.Context) error    { return nil }
func (m *laneMsg) Nak() error                         { return nil }
func (m *laneMsg) NakWithDelay(time.Duration) error   { return nil }
func (m *laneMsg) InProgress() error                  { return nil }
func (m *laneMsg) Term() error                        { return nil }
func (m *laneMsg) TermWithReason(reason string) error { return nil }

// encodeLaneMsg builds a message of kind under (id, epoch), from r's last
// delta and marker.
func encodeLaneMsg(t *testing.T, r *fakeRelay, kind wire.MessageKind, id ckf.ProducerIdentity, epoch uint64) []byte {
	t.Helper()
	wl := wire.WireLease{Epoch: epoch, Instance: "relay-x"}
	var b []byte
	var err error
	switch kind {
	case wire.KindDelta:
		d := r.lastDelta
		d.Identity, d.Lease = id, wl
		b, err = wire.AppendDelta(nil, &d)
	case wire.KindDrainMarker:
		dm := wire.DrainMarker{Identity: id, Lease: wl, ExpectedSequence: r.lastDelta.Sequence}
		b, err = wire.AppendDrainMarker(nil, &dm)
	case wire.KindHeartbeat:
		hb := wire.Heartbeat{Identity: id, Lease: wl, Sequence: r.lastDelta.Sequence, RelayInstance: "relay-x", Time: time.Now()}
		b, err = wire.AppendHeartbeat(nil, &hb)
	case wire.KindSnapshotMarker:
		m := r.lastMarker()
		m.Identity, m.Lease = id, wl
		b, err = wire.AppendSnapshotMarker(nil, &m)
	}
	if err != nil {
		t.Fatalf("%s: %v", kind, err)
	}
	return b
}

// gateRunner is a lane runner of a service that never runs: installed at
// epoch under identity id, whose installed marker is at stream sequence
// markerSeq, with a closed pool (a message that reaches the pool is refused
// with ErrPoolClosed). Its logs go to the returned buffer.
func gateRunner(t *testing.T, e *env, r *fakeRelay, id ckf.ProducerIdentity, epoch, markerSeq uint64) (*laneRunner, *Service, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	cfg := testConfig(t)
	cfg.Logger = zerolog.New(&logs)
	s, err := New(e.nc, e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.res, s.coord = r.res, r.coord
	var lanes [ckf.LaneCount]*ckf.PoolID
	pool := r.pool
	lanes[r.lane] = &pool
	man, err := consumer.NewManifest(s.instance, s.domainID, r.state.Format(), lanes)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := consumer.NewIndexer(man, s.cfg.Search)
	if err != nil {
		t.Fatal(err)
	}
	p, err := consumer.NewPool(ix, s.cfg.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	lr := newLaneRunner(s, r.lane, r.dc, r.pool, r.subj, s.log, s.m.forLane(r.lane, r.dc))
	lr.gen = newPoolGen(p)
	lr.cur = current{identity: id, epoch: epoch, streamSeq: markerSeq,
		lease: ckf.LaneLease{ConsumerInstance: s.instance, PhysicalLane: uint8(r.lane), AssignmentEpoch: 1}}
	lr.reached = r.lastDelta.Sequence // level with its relay: only the gate decides
	return lr, s, &logs
}

// laneCounters returns every non-zero per-lane counter of s as
// "name{kind}" (or "name" for unlabelled ones) → value.
func laneCounters(t *testing.T, s *Service) map[string]float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.GetCounter() == nil || m.GetCounter().GetValue() == 0 {
				continue
			}
			key := mf.GetName()
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "kind" {
					key += "{" + lp.GetValue() + "}"
				}
			}
			out[key] += m.GetCounter().GetValue()
		}
	}
	return out
}

// warned reports whether logs hold a warning about a message of kind.
func warned(t *testing.T, logs *bytes.Buffer, kind wire.MessageKind) bool {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(logs.Bytes()))
	for sc.Scan() {
		var line struct{ Level, Kind string }
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if line.Level == "warn" && line.Kind == kind.String() {
			return true
		}
	}
	return false
}

// Every lane message kind passes one epoch gate: for each relation of its
// (identity, epoch) to the installed assignment, the same classification,
// counters and warnings whatever the kind, and only what a newer epoch
// means depends on whether the message is a snapshot marker.
func TestEveryLaneMessageKindPassesOneEpochGate(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a") // epoch 1
	feed(r, newWorkload(51, 4, 4), func(i int) int { return 2 })
	r.takeEpoch() // 2: the runner's installed epoch
	r.takeEpoch() // 3: the lease record's, a takeover the runner missed
	const superseded, installed, granted, burnt, ungranted = 1, 2, 3, 4, 5
	r.setEpochCounter(burnt) // a lost acquire race: the counter is one above the lease
	raw, err := r.res.Lanes.GetLastMsgForSubject(testCtx(t), r.subj.Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	latest := raw.Sequence // epoch 3's marker

	foreign := r.identityAt(installed)
	foreign.Pool.Dc = ckf.DcIDFromName("dc-z")
	mismatch := r.identityAt(installed)
	mismatch.LayoutGeneration = 2

	type want struct {
		counters map[string]float64
		done     bool
		fault    string // prefix of the outcome's fault; "" none
		next     bool   // the outcome switches to this marker
		warn     bool
		phase    string // "" unchanged (pending)
	}
	c := func(kv ...any) map[string]float64 {
		m := map[string]float64{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = float64(kv[i+1].(int))
		}
		return m
	}
	isMarker := func(k wire.MessageKind) bool { return k == wire.KindSnapshotMarker }
	relations := []struct {
		name      string
		id        ckf.ProducerIdentity
		epoch     uint64
		markerSeq uint64 // the runner's installed marker
		want      func(k wire.MessageKind) want
	}{
		{"current", r.identityAt(installed), installed, latest, func(k wire.MessageKind) want {
			if k == wire.KindDelta || k == wire.KindDrainMarker {
				return want{counters: c(), done: true, fault: "submit_"} // reached the pool
			}
			return want{counters: c()}
		}},
		{"superseded", r.identityAt(superseded), superseded, latest, func(k wire.MessageKind) want {
			return want{counters: c(MetricSuperseded+"{"+k.String()+"}", 1)}
		}},
		{"foreign pool", foreign, installed, latest, func(k wire.MessageKind) want {
			return want{counters: c(MetricMalformed+"{"+malformedForeignPool+"}", 1), warn: true}
		}},
		{"identity mismatch", mismatch, installed, latest, func(k wire.MessageKind) want {
			return want{counters: c(MetricMalformed+"{"+malformedIdentity+"}", 1), warn: true}
		}},
		{"newer, leased, a newer marker on the lane", r.identityAt(granted), granted, latest - 1, func(k wire.MessageKind) want {
			if isMarker(k) {
				return want{counters: c(), done: true, next: true}
			}
			return want{counters: c(), done: true, fault: faultNewerEpoch}
		}},
		{"newer, leased, the latest marker installed", r.identityAt(granted), granted, latest, func(k wire.MessageKind) want {
			if isMarker(k) {
				return want{counters: c(), done: true, next: true}
			}
			return want{counters: c(MetricNewerEpochWithoutMarker+"{"+k.String()+"}", 1, MetricSnapshotRequests, 1,
				MetricFaults+"{"+faultNewerEpoch+"}", 1), warn: true, phase: PhaseAwaitingSnapshot}
		}},
		{"newer, burnt (counted, never leased)", r.identityAt(burnt), burnt, latest, func(k wire.MessageKind) want {
			if isMarker(k) {
				return want{counters: c(), done: true, next: true} // markers answer to the counter
			}
			return want{counters: c(MetricUngrantedEpoch+"{"+k.String()+"}", 1), warn: true}
		}},
		{"newer, above the counter", r.identityAt(ungranted), ungranted, latest, func(k wire.MessageKind) want {
			return want{counters: c(MetricUngrantedEpoch+"{"+k.String()+"}", 1), warn: true}
		}},
	}
	kinds := []wire.MessageKind{wire.KindDelta, wire.KindDrainMarker, wire.KindHeartbeat, wire.KindSnapshotMarker}
	for _, rel := range relations {
		for _, kind := range kinds {
			t.Run(fmt.Sprintf("%s/%s", rel.name, kind), func(t *testing.T) {
				lr, s, logs := gateRunner(t, e, r, r.identityAt(installed), installed, rel.markerSeq)
				m := &laneMsg{subject: r.subj.For(kind), data: encodeLaneMsg(t, r, kind, rel.id, rel.epoch), seq: latest + 100}
				out, done := lr.handle(testCtx(t), m)
				w := rel.want(kind)
				if done != w.done || (out.next != nil) != w.next || !strings.HasPrefix(out.fault, w.fault) || (w.fault == "" && out.fault != "") {
					t.Errorf("outcome %+v done=%t, want done=%t next=%t fault %q…", out, done, w.done, w.next, w.fault)
				}
				if w.next && out.next.streamSeq != m.seq {
					t.Errorf("switches to stream sequence %d, want %d", out.next.streamSeq, m.seq)
				}
				if got := laneCounters(t, s); !maps.Equal(got, w.counters) {
					t.Errorf("counters %v, want %v", got, w.counters)
				}
				if got := warned(t, logs, kind); got != w.warn {
					t.Errorf("warned %t, want %t; logs:\n%s", got, w.warn, logs)
				}
				phase := PhasePending
				if w.phase != "" {
					phase = w.phase
				}
				if st := lr.Status(); st.State != phase {
					t.Errorf("phase %s, want %s", st.State, phase)
				}
			})
		}
	}
}
