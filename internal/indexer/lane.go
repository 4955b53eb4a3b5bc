package indexer

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/backoff"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/ckfrelay/ckfrelay/internal/ctxwait"
	"github.com/ckfrelay/ckfrelay/internal/streams"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// laneRunner follows one lane (protocol.md, "Consumer (indexer) rules").
// Only its run goroutine touches the protocol fields; st is shared with
// Lanes() under mu.
type laneRunner struct {
	svc  *Service
	lane int
	dc   string
	pool ckf.PoolID
	subj wire.LaneSubjects
	log  zerolog.Logger
	m    *laneMetrics
	// faults receives the pool faults of this lane (dispatcher → runner).
	faults chan genFault

	// Run goroutine only.
	localEpoch uint64
	cur        current
	// granted is the highest value the pool's epoch counter was last seen
	// at (a cache): the ceiling of snapshot markers of a newer epoch.
	granted uint64
	// leased is the highest epoch the pool's lease record was seen to name
	// (a cache): the epoch a relay actually took the lease for. Other
	// traffic of a newer epoch is judged against it, not against the
	// counter, which a lost acquire race leaves one above every lease (the
	// loser's burnt epoch, lease.Acquire): nobody holds that epoch, so
	// traffic claiming it is not a takeover.
	leased uint64
	// awaiting is the newer epoch whose traffic (not a marker) the lane met
	// while its latest marker was the installed one (0: none): bootstrapping
	// again would install the same snapshot and meet the same traffic, so
	// the lane left the ready set, asked for a snapshot and waits for a
	// newer epoch's marker, skipping that traffic. Reset by each install.
	awaiting uint64
	// askedAt is when the awaiting lane last asked for a snapshot.
	askedAt time.Time
	// supersededSince is when the lane began dropping superseded traffic
	// without seeing any of its installed epoch (zero: not dropping).
	supersededSince time.Time
	// distrusted is the epoch a superseded_traffic fault retired (0: none):
	// the lane does not bootstrap from a marker of it again, or the latest
	// marker would put it straight back, until another epoch is installed.
	distrusted uint64
	// gen is the pool generation of the last bootstrap attempt (nil when
	// it failed before reaching the pool); an installed lane is consumed
	// through it.
	gen *poolGen

	mu sync.Mutex // guards st
	st laneStatus
}

// current is the lane's installed assignment: the producer traffic
// (identity, wire epoch) translated into the local lease.
type current struct {
	identity  ckf.ProducerIdentity
	epoch     uint64
	lease     ckf.LaneLease
	streamSeq uint64 // stream sequence of the installed marker
}

type laneStatus struct {
	phase     string
	epoch     uint64
	installed uint64
	lag       uint64
	lastFault string
}

// genFault is a pool fault and the generation whose pool reported it, so a
// fault of a replaced pool never retires a lane installed in its successor.
type genFault struct {
	gen   *poolGen
	fault consumer.Fault
}

// markerAt is a decoded snapshot marker and its stream sequence.
type markerAt struct {
	marker    wire.SnapshotMarker
	streamSeq uint64
}

func newLaneRunner(s *Service, lane int, dc string, pool ckf.PoolID, subj wire.LaneSubjects, log zerolog.Logger, m *laneMetrics) *laneRunner {
	r := &laneRunner{svc: s, lane: lane, dc: dc, pool: pool, subj: subj, log: log, m: m,
		faults: make(chan genFault, 8)}
	r.setStatus(PhasePending, "")
	return r
}

// Status returns the lane's row for GET /v1/lanes: the runner phase, the
// producer's wire epoch, and the last installed snapshot sequence or
// admitted delta sequence (raised to the applied sequence by each drain).
func (r *laneRunner) Status() api.LaneStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return api.LaneStatus{
		Lane:              r.lane,
		DC:                r.dc,
		Pool:              r.pool.String(),
		State:             r.st.phase,
		Epoch:             r.st.epoch,
		InstalledSequence: r.st.installed,
		StreamLag:         r.st.lag,
		LastFault:         r.st.lastFault,
	}
}

// setStatus sets the phase and, when fault is non-empty, the last fault.
func (r *laneRunner) setStatus(phase, fault string) {
	r.mu.Lock()
	r.st.phase = phase
	if fault != "" {
		r.st.lastFault = fault
	}
	r.mu.Unlock()
	r.m.setPhase(phase)
	r.m.ready.Set(b2f(phase == PhaseActive))
}

func (r *laneRunner) setInstalled(epoch, seq uint64) {
	r.mu.Lock()
	r.st.epoch, r.st.installed = epoch, seq
	r.mu.Unlock()
	r.m.install.Set(float64(seq))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// deliverFault never blocks the dispatcher; a dropped fault is caught by
// the runner's admission-state poll.
func (r *laneRunner) deliverFault(g *poolGen, f consumer.Fault) {
	select {
	case r.faults <- genFault{gen: g, fault: f}:
	default:
	}
}

// outcome says why consume returned.
type outcome struct {
	// next, when set, is the marker to bootstrap from at once.
	next *markerAt
	// fault names a lane fault (metric kind); the lane backs off, asks for
	// a snapshot when requestSnapshot, and bootstraps from the latest marker.
	fault           string
	detail          string
	requestSnapshot bool
	// healthy: a drain was acknowledged, so the lane made progress.
	healthy bool
}

// run bootstraps and consumes until ctx ends.
func (r *laneRunner) run(ctx context.Context) {
	bo := backoff.New(r.svc.cfg.BootstrapBackoffMin, r.svc.cfg.BootstrapBackoffMax)
	var next *markerAt
	var lastInstalled uint64
	for ctx.Err() == nil {
		if !r.awaitRebuild(ctx) {
			return
		}
		r.setStatus(PhaseBootstrapping, "")
		err := r.bootstrap(ctx, next)
		next = nil
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.bootstrapFailed(ctx, err)
			if !r.pause(ctx, bo.Next()) {
				return
			}
			continue
		}
		if r.cur.streamSeq != lastInstalled {
			// A different marker: earlier failures are not evidence against it.
			bo.Reset()
			lastInstalled = r.cur.streamSeq
		}
		r.setStatus(PhaseActive, "")
		out := r.consume(ctx)
		if ctx.Err() != nil {
			return
		}
		if out.healthy {
			bo.Reset()
		}
		if out.next != nil {
			next = out.next
			continue
		}
		if out.fault == faultSuperseded && r.gen != nil {
			// Fail closed: the installed epoch is not what the producer
			// publishes, so its content may be anything (a forged empty
			// body blanks the lane); answer nothing for the lane until a
			// live epoch is installed.
			r.gen.pool.Indexer().RetireLaneReadiness(r.lane)
		}
		r.m.fault(out.fault)
		r.log.Warn().Str("fault", out.fault).Str("detail", out.detail).Uint64("epoch", r.cur.epoch).
			Msg("lane retired; bootstrapping again")
		r.setStatus(PhaseBackoff, out.fault+": "+out.detail)
		if out.requestSnapshot {
			r.requestSnapshot(ctx)
		}
		if !r.pause(ctx, bo.Next()) {
			return
		}
	}
}

// awaitRebuild waits while the current pool generation cannot serve the
// lane (poolGen.laneDown): bootstrapping into it would only fail. It
// reports whether ctx is still live.
func (r *laneRunner) awaitRebuild(ctx context.Context) bool {
	for {
		g := r.svc.gen.Load()
		if g == nil || !g.laneDown(r.lane) {
			return true
		}
		// The fault notification is best-effort: make sure the rebuild runs.
		r.svc.poolFailed(g)
		r.setStatus(PhaseBackoff, "")
		select {
		case <-ctx.Done():
			return false
		case <-g.replaced:
		}
	}
}

// pause waits d, or less when the generation of the last bootstrap attempt
// is replaced meanwhile: a rebuilt pool is worth bootstrapping into at
// once. It wakes early at most once per replacement (the next bootstrap
// moves r.gen on), so a rebuild cannot make a lane spin. It reports
// whether ctx is still live.
func (r *laneRunner) pause(ctx context.Context, d time.Duration) bool {
	g := r.gen
	if g == nil {
		return ctxwait.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-g.replaced:
		r.gen = nil
	}
	return true
}

// bootstrapFailed counts, logs and records a failed bootstrap and asks the
// producer for a fresh snapshot when one could help.
func (r *laneRunner) bootstrapFailed(ctx context.Context, err error) {
	kind := "bootstrap"
	var ie *Error
	if errors.As(err, &ie) {
		kind = ie.Kind.String()
	}
	if errors.Is(err, ErrNoSnapshot) {
		// A lane registered before its relay's first marker: waiting, not
		// a fault (no fault count, no last fault), so a fresh start stays
		// out of fault alerts.
		r.m.bootstrap("waiting")
		r.log.Info().Err(err).Msg("lane waiting for its first snapshot marker")
		r.setStatus(PhaseBackoff, "")
	} else {
		r.m.bootstrap("failed")
		r.m.fault(kind)
		r.log.Warn().Err(err).Str("fault", kind).Msg("lane bootstrap failed")
		r.setStatus(PhaseBackoff, err.Error())
	}
	switch {
	case errors.Is(err, consumer.ErrWorkerFailed):
		// The pool must be rebuilt; the snapshot on the lane is fine.
		if r.gen != nil {
			r.svc.poolFailed(r.gen)
		}
	case errors.Is(err, ErrWrongFormat), errors.Is(err, ErrConsumer), errors.Is(err, consumer.ErrPoolClosed):
		// A new snapshot of the same producer cannot help.
	default:
		r.requestSnapshot(ctx)
	}
}

func (r *laneRunner) requestSnapshot(ctx context.Context) {
	r.m.snapshotRequested()
	if err := r.svc.coord.RequestSnapshot(ctx, r.svc.cfg.Domain, r.dc, r.svc.requester); err != nil && ctx.Err() == nil {
		r.log.Warn().Err(err).Msg("snapshot request failed")
	}
}

// latestMarker direct-gets the last message on the lane's .snap subject.
func (r *laneRunner) latestMarker(ctx context.Context) (*markerAt, error) {
	raw, err := r.svc.res.Lanes.GetLastMsgForSubject(ctx, r.subj.Snapshot)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, laneError(ErrNoSnapshot, r.lane, nil, "no marker on %s", r.subj.Snapshot)
	}
	if err != nil {
		return nil, laneError(ErrSnapshotFetch, r.lane, err, "direct get %s", r.subj.Snapshot)
	}
	m, err := wire.DecodeSnapshotMarker(raw.Data)
	if err != nil {
		r.countMalformed(err)
		return nil, laneError(ErrSnapshotInvalid, r.lane, err, "marker at stream sequence %d", raw.Sequence)
	}
	if m.Identity.Pool != r.pool {
		r.m.malformed(malformedForeignPool)
		return nil, laneError(ErrSnapshotInvalid, r.lane, nil, "marker at stream sequence %d names pool %s", raw.Sequence, m.Identity.Pool)
	}
	if !r.epochGranted(ctx, m.Lease.Epoch) {
		r.m.ungranted(wire.KindSnapshotMarker.String())
		return nil, laneError(ErrSnapshotInvalid, r.lane, nil, "marker at stream sequence %d: epoch %d was never granted to the pool (granted: %d)",
			raw.Sequence, m.Lease.Epoch, r.granted)
	}
	return &markerAt{marker: m, streamSeq: raw.Sequence}, nil
}

// epochGranted reports whether the lease coordinator has granted the pool
// epoch: anyone who can publish on the lane subjects can claim any epoch,
// but only a relay that took the lease moved the pool's epoch counter. A
// cached grant answers most calls. An epoch above it re-reads the counter
// before it is refused, because a genuine new epoch's first marker can
// arrive before this runner has looked at the counter since it moved.
// A failed read refuses for now (the message is dropped; a lane that
// needs the epoch bootstraps again from the latest marker later).
func (r *laneRunner) epochGranted(ctx context.Context, epoch uint64) bool {
	if epoch <= r.granted {
		return true
	}
	cur, err := r.svc.coord.CurrentEpoch(ctx, r.svc.cfg.Domain, r.dc)
	if err != nil {
		r.log.Warn().Err(err).Uint64("epoch", epoch).Msg("reading the pool's granted epoch failed; refusing the epoch for now")
		return false
	}
	r.granted = cur
	return epoch <= cur
}

// leaseGranted reports whether a relay took the pool's lease for epoch:
// whether the pool's lease record names epoch or a later one. Lease epochs
// only go up, so a cached record epoch at or above epoch answers without a
// read; a newer epoch re-reads the record, because a takeover's first
// message can arrive before this runner has looked at the record since it
// moved. A relay writes its lease before it publishes under it, so the
// re-read always sees a genuine epoch. With no record (released: Release
// deletes it, the counter stays) the counter decides, as for markers;
// newerWithoutMarker keeps a burnt epoch from looping the lane then. A
// failed read refuses for now, as epochGranted does.
func (r *laneRunner) leaseGranted(ctx context.Context, epoch uint64) bool {
	if epoch <= r.leased {
		return true
	}
	li, err := r.svc.coord.CurrentLease(ctx, r.svc.cfg.Domain, r.dc)
	switch {
	case errors.Is(err, lease.ErrNoLease):
		return r.epochGranted(ctx, epoch)
	case err != nil:
		r.log.Warn().Err(err).Uint64("epoch", epoch).Msg("reading the pool's lease record failed; refusing the epoch for now")
		return false
	}
	r.leased = max(r.leased, li.Epoch)
	return epoch <= li.Epoch
}

// newerWithoutMarker handles a delta, drain marker or heartbeat of a newer
// epoch than the installed one. A snapshot marker of a newer epoch
// precedes its other traffic on the lane, so the lane missed it.
//
// An epoch no relay took the lease for is skipped and counted
// (ungranted). A granted one means the installed epoch is superseded: when
// the lane holds a marker newer than the installed one, it bootstraps from
// the latest (missedMarker). When the latest marker is the installed one,
// bootstrapping would install the same snapshot, resume after it and meet
// this traffic again, forever: instead the lane leaves the ready set, asks
// the relay for a snapshot and goes on consuming, skipping (and counting)
// that traffic until a marker arrives (handleMarker).
func (r *laneRunner) newerWithoutMarker(ctx context.Context, kind wire.MessageKind, epoch uint64) (outcome, bool) {
	if !r.leaseGranted(ctx, epoch) {
		return r.ungrantedOutcome(kind, epoch)
	}
	if r.awaiting != 0 {
		// Out of the ready set and asked already: wait for the marker,
		// asking again as often as failing bootstraps would at most (a
		// relay coalesces requests; one restarting may miss one).
		r.awaiting = max(r.awaiting, epoch)
		r.m.withoutMarker(kind.String())
		if now := r.svc.now(); now.Sub(r.askedAt) >= r.svc.cfg.BootstrapBackoffMax {
			r.askedAt = now
			r.requestSnapshot(ctx)
		}
		return outcome{}, false
	}
	at, err := r.latestMarker(ctx)
	if err != nil || at.streamSeq != r.cur.streamSeq {
		// A newer marker to bootstrap from, or none that can be read now
		// (bootstrap retries with backoff and asks for a snapshot).
		return missedMarker(kind, epoch)
	}
	r.awaiting = epoch
	r.m.withoutMarker(kind.String())
	r.m.fault(faultNewerEpoch)
	r.gen.pool.Indexer().RetireLaneReadiness(r.lane)
	detail := fmt.Sprintf("%s of epoch %d without its marker; the latest marker is the installed one (epoch %d, stream sequence %d); asked for a snapshot",
		kind, epoch, r.cur.epoch, r.cur.streamSeq)
	r.log.Warn().Str("kind", kind.String()).Uint64("epoch", epoch).Uint64("current_epoch", r.cur.epoch).
		Msg("newer epoch without its marker; out of the ready set until a marker arrives")
	r.setStatus(PhaseAwaitingSnapshot, faultNewerEpoch+": "+detail)
	r.askedAt = r.svc.now()
	r.requestSnapshot(ctx)
	return outcome{}, false
}

// missedMarker is the outcome of a granted newer epoch's message (of kind)
// reaching a lane that never saw that epoch's snapshot marker while a
// newer marker than the installed one is on the lane: the installed epoch
// is superseded, so the lane bootstraps from the latest marker.
func missedMarker(kind wire.MessageKind, epoch uint64) (outcome, bool) {
	return outcome{fault: faultNewerEpoch, detail: kind.String() + " of epoch " + strconv.FormatUint(epoch, 10) + " without its marker"}, true
}

// ungrantedOutcome counts and skips a lane message whose epoch the lease
// coordinator never granted: the lane stays as it is.
func (r *laneRunner) ungrantedOutcome(kind wire.MessageKind, epoch uint64) (outcome, bool) {
	r.m.ungranted(kind.String())
	r.log.Warn().Str("kind", kind.String()).Uint64("epoch", epoch).Uint64("granted", r.granted).Uint64("leased", r.leased).
		Msg("lane message under an epoch the lease coordinator never granted; skipped")
	return outcome{}, false
}

// sawCurrent records traffic of the installed epoch.
func (r *laneRunner) sawCurrent() { r.supersededSince = time.Time{} }

// dropSuperseded counts a dropped message of an older epoch. Once the lane
// has dropped such traffic for Config.SupersededFaultAfter without seeing
// any of its own epoch, its installed epoch is not what its producer
// publishes under: it reports a fault and bootstraps again (from the
// latest marker, itself checked against the granted epoch).
func (r *laneRunner) dropSuperseded(kind wire.MessageKind, epoch uint64) (outcome, bool) {
	r.m.superseded(kind.String())
	now := r.svc.now()
	if r.supersededSince.IsZero() {
		r.supersededSince = now
		return outcome{}, false
	}
	if waited := now.Sub(r.supersededSince); waited >= r.svc.cfg.SupersededFaultAfter {
		r.distrusted = r.cur.epoch
		return outcome{fault: faultSuperseded, requestSnapshot: true,
			detail: fmt.Sprintf("dropped traffic of epoch %d (and older) for %s without any of the installed epoch %d",
				epoch, waited.Round(time.Millisecond), r.cur.epoch)}, true
	}
	return outcome{}, false
}

// bootstrap installs the snapshot of at (or of the latest marker when at is
// nil) under a fresh local lease.
func (r *laneRunner) bootstrap(ctx context.Context, at *markerAt) error {
	if at == nil {
		var err error
		if at, err = r.latestMarker(ctx); err != nil {
			return err
		}
	}
	mk := &at.marker
	if r.distrusted != 0 && mk.Lease.Epoch == r.distrusted {
		return laneError(ErrSnapshotInvalid, r.lane, nil, "marker at stream sequence %d is of epoch %d, retired for superseded traffic; waiting for a marker of the epoch the producer publishes under",
			at.streamSeq, mk.Lease.Epoch)
	}
	r.gen = nil
	g, err := r.svc.ensurePool(mk.Identity.Format)
	if err != nil {
		return laneError(ErrLaneConfig, r.lane, err, "building the ingestion pool")
	}
	r.gen = g
	pool := g.pool
	format := pool.Indexer().Manifest().Format()
	if mk.Identity.Format != format {
		return laneError(ErrWrongFormat, r.lane, consumer.ErrWrongFormat,
			"lane format %+v, indexer format %+v", mk.Identity.Format, format)
	}
	words, err := r.fetchSnapshot(ctx, mk, format)
	if err != nil {
		return err
	}
	r.localEpoch++
	lease := ckf.LaneLease{ConsumerInstance: r.svc.instance, PhysicalLane: uint8(r.lane), AssignmentEpoch: r.localEpoch}
	if err := pool.Assign(mk.Identity, lease); err != nil {
		if errors.Is(err, consumer.ErrWrongFormat) {
			return laneError(ErrWrongFormat, r.lane, err, "assign")
		}
		return laneError(ErrAssign, r.lane, err, "assign epoch %d", mk.Lease.Epoch)
	}
	snap := mk.ToCkf(lease, words)
	out, err := pool.InstallSnapshot(&snap)
	if err != nil {
		return laneError(ErrInstall, r.lane, err, "install sequence %d", mk.Sequence)
	}
	if out.Kind != consumer.OutcomeSnapshotInstalled {
		return laneError(ErrInstall, r.lane, nil, "install sequence %d: %s", mk.Sequence, out)
	}
	r.cur = current{identity: mk.Identity, epoch: mk.Lease.Epoch, lease: lease, streamSeq: at.streamSeq}
	r.supersededSince = time.Time{}
	r.distrusted = 0
	r.awaiting = 0
	r.setInstalled(mk.Lease.Epoch, mk.Sequence)
	r.m.bootstrap("installed")
	r.log.Info().Uint64("epoch", mk.Lease.Epoch).Uint64("sequence", mk.Sequence).
		Uint64("stream_seq", at.streamSeq).Str("relay", mk.Lease.Instance).Msg("snapshot installed")
	return nil
}

// fetchSnapshot reads the marker's body object and decodes its words in
// the indexer format. Everything the marker says about the object is
// checked before a byte of it is read: the bucket is the configured one,
// the name is the one this pool's relay gives that (epoch, sequence), the
// declared size is the format's body size, and the stored object's info
// agrees (size, digest). The read itself is then limited to that size and
// decodes straight into the words, so a bootstrap holds one body of the
// configured format at most, whatever the bus or the store say.
func (r *laneRunner) fetchSnapshot(ctx context.Context, mk *wire.SnapshotMarker, format ckf.FormatIdentity) ([]uint64, error) {
	if err := r.checkObject(mk, format); err != nil {
		r.m.malformed(malformedObject)
		return nil, err
	}
	store := r.svc.res.Snapshots
	ictx, cancel := context.WithTimeout(ctx, r.svc.cfg.SnapshotFetchTimeout)
	info, err := store.GetInfo(ictx, mk.ObjectName)
	cancel()
	if err != nil {
		return nil, laneError(ErrSnapshotFetch, r.lane, err, "object info %s/%s", mk.ObjectBucket, mk.ObjectName)
	}
	if info.Deleted || info.Size != mk.Size || info.Digest != wire.ObjectDigest(mk.Digest) {
		r.m.malformed(malformedObject)
		return nil, laneError(ErrSnapshotInvalid, r.lane, nil, "object %s holds %d bytes (digest %s, deleted %t); the marker says %d bytes (digest %s)",
			mk.ObjectName, info.Size, info.Digest, info.Deleted, mk.Size, wire.ObjectDigest(mk.Digest))
	}
	words, err := r.readBody(ctx, store, mk, format)
	if err != nil {
		var de *wire.DecodeError
		if errors.As(err, &de) {
			r.countMalformed(err)
			return nil, laneError(ErrSnapshotInvalid, r.lane, err, "object %s", mk.ObjectName)
		}
		return nil, laneError(ErrSnapshotFetch, r.lane, err, "object %s/%s", mk.ObjectBucket, mk.ObjectName)
	}
	return words, nil
}

// checkObject checks the body location and size a marker declares.
func (r *laneRunner) checkObject(mk *wire.SnapshotMarker, format ckf.FormatIdentity) error {
	if mk.ObjectBucket != wire.SnapshotBucket {
		return laneError(ErrSnapshotInvalid, r.lane, nil, "marker names object bucket %q; bodies are read only from %s", mk.ObjectBucket, wire.SnapshotBucket)
	}
	want, err := wire.SnapshotObjectName(r.svc.cfg.Domain, r.dc, mk.Lease.Epoch, mk.Sequence)
	if err != nil || mk.ObjectName != want {
		return laneError(ErrSnapshotInvalid, r.lane, err, "marker names object %q, the pool's body of epoch %d sequence %d is %q",
			mk.ObjectName, mk.Lease.Epoch, mk.Sequence, want)
	}
	if size := wire.SnapshotBodySize(format.BucketCount); mk.Size != size {
		return laneError(ErrSnapshotInvalid, r.lane, nil, "marker declares %d bytes, a body of the indexer format is %d", mk.Size, size)
	}
	return nil
}

// readBody reads the marker's body, retrying an attempt that timed out: a
// stalled chunk transfer is a property of that read, not of the snapshot,
// and the next read of the same object usually goes through. Every attempt
// has its own deadline, scaled by the size the marker declares.
func (r *laneRunner) readBody(ctx context.Context, store jetstream.ObjectStore, mk *wire.SnapshotMarker, format ckf.FormatIdentity) ([]uint64, error) {
	cfg := r.svc.cfg
	timeout := cfg.SnapshotFetchTimeout + time.Duration(mk.Size)*time.Second/SnapshotFetchBytesPerSecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, timeout)
		words, err := r.svc.readObject(actx, store, mk, format)
		cancel()
		if err == nil || ctx.Err() != nil || attempt >= cfg.SnapshotFetchAttempts || !isTimeout(err) {
			return words, err
		}
		r.m.fetchRetried()
		r.log.Warn().Err(err).Int("attempt", attempt).Str("object", mk.ObjectName).Msg("snapshot read timed out; retrying")
	}
}

// readSnapshotObject streams the marker's object into words: at most
// mk.Size bytes (plus one, to see the end) are read, and the SHA-256 of
// what was read must be the marker's digest.
func readSnapshotObject(ctx context.Context, store jetstream.ObjectStore, mk *wire.SnapshotMarker, format ckf.FormatIdentity) ([]uint64, error) {
	res, err := store.Get(ctx, mk.ObjectName)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	h := sha256.New()
	words, err := wire.ReadSnapshotBody(io.TeeReader(io.LimitReader(res, int64(mk.Size)+1), h), format, nil)
	if err != nil {
		return nil, err
	}
	if err := mk.VerifyDigest(h); err != nil {
		return nil, err
	}
	return words, nil
}

// isTimeout reports whether err is a read or request deadline passing.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// countMalformed counts a refused message by its wire error kind.
func (r *laneRunner) countMalformed(err error) {
	var de *wire.DecodeError
	if errors.As(err, &de) {
		r.m.malformed(wireKindLabel(de.Kind))
		return
	}
	r.m.malformed("decode")
}

// consume follows the lane from just after the installed marker until the
// lane must bootstrap again or ctx ends.
func (r *laneRunner) consume(ctx context.Context) outcome {
	cons, err := r.svc.js.OrderedConsumer(ctx, streams.LaneStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{r.subj.Filter},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    r.cur.streamSeq + 1,
	})
	if err != nil {
		return outcome{fault: ErrConsumer.String(), detail: err.Error()}
	}
	cctx, cancel := context.WithCancel(ctx)
	msgs := make(chan jetstream.Msg, 64)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-cctx.Done():
		}
	})
	if err != nil {
		cancel()
		return outcome{fault: ErrConsumer.String(), detail: err.Error()}
	}
	// Unblock the callback before stopping, so the subscription's delivery
	// goroutine never hangs on msgs.
	defer cc.Stop()
	defer cancel()

	g := r.gen
	streamGen := r.svc.laneStreamGen.Load()
	poll := time.NewTicker(r.svc.cfg.StatePollInterval)
	defer poll.Stop()
	var healthy bool
	for {
		select {
		case <-ctx.Done():
			return outcome{}
		case m := <-msgs:
			out, done := r.handle(ctx, m)
			healthy = healthy || out.healthy
			if done {
				out.healthy = healthy
				return out
			}
		case gf := <-r.faults:
			if out, ok := r.faultOutcome(g, gf); ok {
				out.healthy = healthy
				return out
			}
		case <-g.replaced:
			// The dispatcher hands the failed worker's fault to its lanes
			// before it asks for the rebuild: when both are ready, the
			// fault says why, the rebuild only what followed.
			out := r.pendingFault(g)
			out.healthy = healthy
			return out
		case <-poll.C:
			if r.svc.laneStreamGen.Load() != streamGen {
				return outcome{fault: faultStreamReplaced, detail: "the lane stream was deleted or recreated", requestSnapshot: true, healthy: healthy}
			}
			if g.laneDown(r.lane) {
				r.svc.poolFailed(g)
				return outcome{fault: consumer.FaultWorkerFailed.String(), detail: "the lane's ingestion worker failed", healthy: healthy}
			}
			if st, ok := g.pool.LaneState(r.lane); ok && st.State != consumer.AdmissionActive {
				if g.failed.Load() {
					// Retired by the rebuild's Close: nothing to ask the producer.
					return outcome{fault: faultPoolRebuilt, detail: "the ingestion pool is being rebuilt", healthy: healthy}
				}
				return outcome{fault: "retired", detail: "admission state " + st.State.String(), requestSnapshot: true, healthy: healthy}
			}
		}
	}
}

// faultOutcome turns a pool fault into the lane's outcome; ok is false
// for a fault of an earlier pool or assignment.
func (r *laneRunner) faultOutcome(g *poolGen, gf genFault) (outcome, bool) {
	f := gf.fault
	if gf.gen != g || f.HasLease && f.Lease != r.cur.lease {
		return outcome{}, false
	}
	if f.Kind == consumer.FaultWorkerFailed {
		// The stream still holds the marker and every delta after it: the
		// rebuilt pool needs no fresh snapshot.
		return outcome{fault: faultKind(f), detail: f.String()}, true
	}
	return outcome{fault: faultKind(f), detail: f.String(), requestSnapshot: true}, true
}

// pendingFault is the outcome of a lane whose pool g was replaced: the
// first fault of g still queued for the lane, or pool_rebuilt.
func (r *laneRunner) pendingFault(g *poolGen) outcome {
	for {
		select {
		case gf := <-r.faults:
			if out, ok := r.faultOutcome(g, gf); ok {
				return out
			}
		default:
			return outcome{fault: faultPoolRebuilt, detail: "the ingestion pool was rebuilt"}
		}
	}
}

// faultStreamReplaced is the fault kind of a lane whose stream was
// replaced under its consumer.
const faultStreamReplaced = "lane_stream_replaced"

// faultPoolRebuilt is the fault kind of a lane retired by a pool rebuild.
const faultPoolRebuilt = "pool_rebuilt"

// poolRefused turns a SubmitDelta or CompleteDrain error into the lane's
// outcome. A failed worker, a closed pool or a refusal while the pool is
// being rebuilt (its Close retires every lane) is the pool's fault, not the
// lane's: the stream can be replayed, so no snapshot is requested.
func (r *laneRunner) poolRefused(err error) outcome {
	out := outcome{fault: submitFaultKind(err), detail: err.Error(), requestSnapshot: true}
	switch {
	case errors.Is(err, consumer.ErrWorkerFailed):
		// One kind however the lane learnt of it (fault channel, state
		// poll or this refusal), so operators count worker failures per
		// lane in one series.
		out.fault = consumer.FaultWorkerFailed.String()
		r.svc.poolFailed(r.gen)
		out.requestSnapshot = false
	case errors.Is(err, consumer.ErrPoolClosed), r.gen.failed.Load():
		out.requestSnapshot = false
	}
	return out
}

// faultKind is the metric kind of a pool fault.
func faultKind(f consumer.Fault) string {
	if f.Kind == consumer.FaultLaneDeactivated {
		return f.LaneFault.Kind.String()
	}
	return f.Kind.String()
}

// handle processes one lane message; done reports that consume must return
// out.
func (r *laneRunner) handle(ctx context.Context, m jetstream.Msg) (out outcome, done bool) {
	if meta, err := m.Metadata(); err == nil {
		r.m.lag.Set(float64(meta.NumPending))
		r.mu.Lock()
		r.st.lag = meta.NumPending
		r.mu.Unlock()
	}
	data := m.Data()
	kind, err := wire.PeekKind(data)
	if err != nil {
		return r.malformed(err, m.Subject())
	}
	if r.subj.For(kind) != m.Subject() {
		r.m.malformed(malformedSubject)
		r.log.Warn().Str("subject", m.Subject()).Str("kind", kind.String()).Msg("lane message on the wrong subject; skipped")
		return outcome{}, false
	}
	switch kind {
	case wire.KindDelta:
		d, err := wire.DecodeDelta(data)
		if err != nil {
			return r.malformed(err, m.Subject())
		}
		return r.handleDelta(ctx, m, &d)
	case wire.KindDrainMarker:
		dm, err := wire.DecodeDrainMarker(data)
		if err != nil {
			return r.malformed(err, m.Subject())
		}
		return r.handleDrain(ctx, &dm)
	case wire.KindSnapshotMarker:
		sm, err := wire.DecodeSnapshotMarker(data)
		if err != nil {
			return r.malformed(err, m.Subject())
		}
		return r.handleMarker(ctx, m, &sm)
	default: // heartbeat: validated; it carries nothing the lane applies
		hb, err := wire.DecodeHeartbeat(data)
		if err != nil {
			return r.malformed(err, m.Subject())
		}
		return r.handleHeartbeat(ctx, &hb)
	}
}

func (r *laneRunner) malformed(err error, subject string) (outcome, bool) {
	r.countMalformed(err)
	r.log.Warn().Err(err).Str("subject", subject).Msg("malformed lane message; skipped")
	return outcome{}, false
}

// traffic classifies a message's (identity, wire epoch) against the current
// assignment.
type traffic uint8

const (
	trafficCurrent traffic = iota + 1
	trafficSuperseded
	trafficNewer
	trafficForeign
	// trafficMismatch: the installed epoch under another identity. A relay
	// keeps one identity per epoch (its incarnation is the epoch), so this
	// is not a take-over: it is skipped rather than obeyed.
	trafficMismatch
)

func (r *laneRunner) classify(id *ckf.ProducerIdentity, epoch uint64) traffic {
	switch {
	case id.Pool != r.pool:
		return trafficForeign
	case epoch < r.cur.epoch:
		return trafficSuperseded
	case epoch > r.cur.epoch:
		return trafficNewer
	case *id != r.cur.identity:
		return trafficMismatch
	}
	return trafficCurrent
}

// gateAction is what a lane message's handler does once the epoch gate
// has judged the message.
type gateAction uint8

const (
	// gateDone: the gate dealt with the message (skipped, counted, logged,
	// or turned into the lane's outcome); the handler returns that outcome.
	gateDone gateAction = iota + 1
	// gateApply: traffic of the installed epoch and identity.
	gateApply
	// gateSwitch: a snapshot marker of a granted newer epoch; the lane
	// bootstraps from it.
	gateSwitch
)

// gate is the lane's one epoch gate: every lane message kind passes it with
// its producer identity, wire epoch and sequence before its handler acts
// on it, so every kind is classified, counted and logged alike. The trust
// rules: traffic of another pool, of the installed epoch under another
// identity, or of an epoch never granted is warned about, counted by kind
// and skipped; superseded traffic is counted and feeds the
// superseded-traffic fault. Only what a newer epoch means depends on the
// kind: a snapshot marker is that epoch's entry point (judged against the
// epoch counter: gateSwitch), any other message is a sign the lane missed
// it (judged against the lease record: newerWithoutMarker).
func (r *laneRunner) gate(ctx context.Context, kind wire.MessageKind, id *ckf.ProducerIdentity, epoch, seq uint64) (gateAction, outcome, bool) {
	t := r.classify(id, epoch)
	switch t {
	case trafficForeign, trafficMismatch:
		label, msg := malformedForeignPool, "lane message of another pool; skipped"
		if t == trafficMismatch {
			label, msg = malformedIdentity, "lane message of the installed epoch under another producer identity; skipped"
		}
		r.m.malformed(label)
		r.log.Warn().Str("kind", kind.String()).Str("pool", id.Pool.String()).Uint64("epoch", epoch).
			Uint64("incarnation", id.ProducerIncarnation).Uint64("layout_generation", id.LayoutGeneration).
			Uint64("sequence", seq).Msg(msg)
		return gateDone, outcome{}, false
	case trafficSuperseded:
		r.log.Debug().Str("kind", kind.String()).Uint64("epoch", epoch).Uint64("current_epoch", r.cur.epoch).
			Uint64("sequence", seq).Msg("superseded lane message dropped")
		out, done := r.dropSuperseded(kind, epoch)
		return gateDone, out, done
	case trafficNewer:
		if kind != wire.KindSnapshotMarker {
			out, done := r.newerWithoutMarker(ctx, kind, epoch)
			return gateDone, out, done
		}
		if !r.epochGranted(ctx, epoch) {
			out, done := r.ungrantedOutcome(kind, epoch)
			return gateDone, out, done
		}
		return gateSwitch, outcome{}, false
	}
	r.sawCurrent()
	return gateApply, outcome{}, false
}

func (r *laneRunner) handleDelta(ctx context.Context, m jetstream.Msg, d *wire.Delta) (outcome, bool) {
	if act, out, done := r.gate(ctx, wire.KindDelta, &d.Identity, d.Lease.Epoch, d.Sequence); act != gateApply {
		return out, done
	}
	cd := d.ToCkf(r.cur.lease)
	pctx := propagation.TraceContext{}.Extract(ctx, streams.HeaderCarrier(m.Headers()))
	_, span := r.svc.tracer.Start(pctx, SpanLaneApply,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String("nats"),
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingOperationName("apply"),
			semconv.MessagingDestinationName(m.Subject()),
			semconv.MessagingMessageBodySize(len(m.Data())),
			attribute.Int("lane", r.lane),
			attribute.String("dc", r.dc),
			attribute.Int64("sequence", int64(d.Sequence)),
			attribute.Int("images", len(d.Images)),
		))
	err := r.gen.pool.SubmitDelta(&cd)
	admitted := time.Now()
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	if err != nil {
		return r.poolRefused(err), true
	}
	r.m.deltas.Inc()
	r.m.images.Add(float64(len(d.Images)))
	r.setInstalled(r.cur.epoch, d.Sequence)
	if t, ok := eventTime(m.Headers()); ok {
		if lat := admitted.Sub(t); lat >= 0 {
			r.m.observeLatency(lat.Seconds(), span.SpanContext())
		}
	}
	return outcome{}, false
}

// submitFaultKind names a SubmitDelta refusal for the fault metric.
func submitFaultKind(err error) string {
	var ie *consumer.IngestionError
	if errors.As(err, &ie) {
		return "submit_" + ingestionKindLabel(ie.Kind)
	}
	return "submit"
}

func ingestionKindLabel(k consumer.IngestionErrorKind) string {
	switch k {
	case consumer.ErrLaneRetired:
		return "lane_retired"
	case consumer.ErrAwaitingSnapshot:
		return "awaiting_snapshot"
	case consumer.ErrLaneUnassigned:
		return "lane_unassigned"
	case consumer.ErrSaturated:
		return "saturated"
	case consumer.ErrOutstandingImageLimit:
		return "outstanding_image_limit"
	case consumer.ErrDirtyToAppliedAgeExceeded:
		return "dirty_to_applied_age_exceeded"
	case consumer.ErrControlTimeout:
		return "control_timeout"
	case consumer.ErrWorkerFailed:
		return "worker_failed"
	case consumer.ErrPoolClosed:
		return "pool_closed"
	}
	return "error"
}

// eventTime parses EventTimeHeader.
func eventTime(h nats.Header) (time.Time, bool) {
	v := h.Get(EventTimeHeader)
	if v == "" {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ns <= 0 {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

func (r *laneRunner) handleDrain(ctx context.Context, dm *wire.DrainMarker) (outcome, bool) {
	if act, out, done := r.gate(ctx, wire.KindDrainMarker, &dm.Identity, dm.Lease.Epoch, dm.ExpectedSequence); act != gateApply {
		return out, done
	}
	res, err := r.gen.pool.CompleteDrain(dm.ToCkf(r.cur.lease))
	if err != nil {
		return r.poolRefused(err), true
	}
	if res.Kind != consumer.OutcomeDrainAcknowledged {
		// A drain that exposes a dropped final delta: the pool retired the
		// lane (DeactivateAndSnapshot).
		return outcome{fault: res.Fault.Kind.String(), detail: res.String(), requestSnapshot: true}, true
	}
	r.setInstalled(r.cur.epoch, res.InstalledSequence)
	return outcome{healthy: true}, false
}

// handleHeartbeat tells the lane its installed epoch is still alive (the
// gate records it) or that it is not. It carries nothing to apply.
func (r *laneRunner) handleHeartbeat(ctx context.Context, hb *wire.Heartbeat) (outcome, bool) {
	_, out, done := r.gate(ctx, wire.KindHeartbeat, &hb.Identity, hb.Lease.Epoch, hb.Sequence)
	return out, done
}

func (r *laneRunner) handleMarker(ctx context.Context, m jetstream.Msg, sm *wire.SnapshotMarker) (outcome, bool) {
	switch act, out, done := r.gate(ctx, wire.KindSnapshotMarker, &sm.Identity, sm.Lease.Epoch, sm.Sequence); act {
	case gateDone:
		return out, done
	case gateApply:
		return outcome{}, false // an active lane skips forward snapshots
	}
	meta, err := m.Metadata()
	if err != nil {
		return outcome{fault: "metadata", detail: err.Error()}, true
	}
	r.log.Info().Uint64("epoch", sm.Lease.Epoch).Uint64("current_epoch", r.cur.epoch).
		Uint64("sequence", sm.Sequence).Msg("newer producer epoch; switching")
	return outcome{next: &markerAt{marker: *sm, streamSeq: meta.Sequence.Stream}}, true
}
