package follow

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

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
	return &markerAt{marker: m, streamSeq: raw.Sequence, stored: raw.Time}, nil
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
	r.setOwner(mk.Identity, mk.Lease.Epoch)
	r.supersededSince = time.Time{}
	r.distrusted = 0
	r.awaiting = 0
	r.behind = false
	r.reached = mk.Sequence
	r.setInstalled(mk.Lease.Epoch, mk.Sequence)
	r.heardAt(at.stored)
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
