package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/producer"
	"github.com/ckfrelay/ckfrelay/pkg/retry"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// A checkpoint is one object per pool in the snapshot bucket
// (wire.SnapshotBucket), named CheckpointObjectName and overwritten each
// time. Its body is exactly producer.State.Checkpoint's encoding (which
// carries its own format, mode and checksum); the object's metadata says
// what it covers, so a relay can judge it before fetching the body:
//
//	ckf-input-sequence        KVEVENTS stream sequence of the last input message applied
//	ckf-input-stream-created  KVEVENTS creation time (RFC 3339): a recreated stream restarts its sequences
//	ckf-format                CheckpointFormatTag of the state's format and hash mode
//
// The object store writes the metadata only after the body, in one object
// revision, so the two always belong together.
const (
	MetaInputSequence      = "ckf-input-sequence"
	MetaInputStreamCreated = "ckf-input-stream-created"
	MetaFormat             = "ckf-format"
)

// CheckpointObjectName names a pool's checkpoint object. Snapshot bodies
// live under "snap/", so the relay's snapshot pruning never touches it.
func CheckpointObjectName(domain, dc string) (string, error) {
	if err := wire.ValidateToken("domain", domain); err != nil {
		return "", err
	}
	if err := wire.ValidateToken("dc", dc); err != nil {
		return "", err
	}
	return "ckpt/" + domain + "/" + dc, nil
}

// CheckpointFormatTag renders the fields a checkpoint must share with the
// restoring relay's configuration.
func CheckpointFormatTag(f ckf.FormatIdentity, mode ckf.HashMode) string {
	return fmt.Sprintf("v%d/fp%d/slots%d/buckets%d/seed%016x/%s", f.FormatVersion, f.FingerprintBits, f.SlotsPerBucket, f.BucketCount, f.Seed, mode)
}

// Checkpoint outcomes (label of ckf_relay_checkpoints_total).
const (
	cpWritten         = "written"
	cpWriteError      = "write_error"
	cpNotHeld         = "skipped_lease_not_held"
	cpRestored        = "restored"
	cpRestoredNew     = "restored_recreated_stream"
	cpAbsent          = "absent"
	cpRejectedFormat  = "rejected_format"
	cpRejectedCorrupt = "rejected_corrupt"
	cpRejectedStream  = "rejected_stream"
	cpLoadError       = "load_error"
	// cpRejectedBudget: an intact checkpoint whose tables exceed the
	// restore budget (producer.ErrCheckpointOverBudget). This build never
	// writes one (see cpSkippedBudget), so it comes from a build that did;
	// no build restores it, so the epoch replays its input and overwrites it.
	cpRejectedBudget = "rejected_over_budget"
	// cpSkippedBudget: the state exceeds the restore budget (tables kept
	// the capacity of blocks since removed), so a checkpoint of it could
	// not be restored: none is written and the stored one stays valid.
	cpSkippedBudget = "skipped_over_budget"
	// cpKeptUnreadable: this epoch could not read the stored checkpoint
	// (a transport error, not a rejected one), so it never replaces it.
	cpKeptUnreadable = "skipped_unread_checkpoint"
)

// inputStream identifies the input stream incarnation a checkpoint's
// sequence refers to.
type inputStream struct {
	created  time.Time
	firstSeq uint64 // first sequence still stored (lastSeq+1 when empty)
	lastSeq  uint64
	maxAge   time.Duration
}

// dropped is how many sequences from `from` on the stream no longer holds:
// a rebuild that must replay from `from` cannot see their events.
func (s inputStream) dropped(from uint64) uint64 {
	if s.firstSeq > from {
		return s.firstSeq - from
	}
	return 0
}

func (r *Relay) inputStreamInfo(ctx context.Context, events jetstream.Stream) (inputStream, error) {
	info, err := events.Info(ctx)
	if err != nil {
		return inputStream{}, fmt.Errorf("relay: input stream info: %w", err)
	}
	st := inputStream{created: info.Created, firstSeq: info.State.FirstSeq, lastSeq: info.State.LastSeq, maxAge: info.Config.MaxAge}
	if st.firstSeq == 0 && st.lastSeq > 0 { // defensive: an empty stream reports last+1
		st.firstSeq = st.lastSeq + 1
	}
	return st, nil
}

// loadCheckpoint restores the pool's checkpoint if there is a usable one
// for cfg and the current input stream. Anything else (absent, another
// format or mode, corrupt, over the restore budget, another stream, fetch
// failure) is counted and logged and yields ok=false: the caller replays
// the whole input.
//
// unread reports a checkpoint that exists but could not be read (a
// transport or server error, as opposed to one that is absent or was
// read and rejected): the caller must not overwrite it, since it may hold
// state the input stream no longer has (a recreated stream, events past
// retention) and a later epoch may read it.
func (r *Relay) loadCheckpoint(ctx context.Context, snaps jetstream.ObjectStore, cfg ckf.Config, stream inputStream) (state *producer.State, inputSeq uint64, ok, unread bool) {
	name, err := CheckpointObjectName(r.cfg.Domain, r.cfg.DC)
	if err != nil {
		return nil, 0, false, false
	}
	log := r.log.With().Str("object", name).Logger()
	reject := func(outcome string, err error, msg string) (*producer.State, uint64, bool, bool) {
		r.m.checkpoints.WithLabelValues(outcome).Inc()
		if outcome == cpLoadError {
			log.Warn().Err(err).Str("outcome", outcome).Msg(msg + "; replaying the whole input stream, and keeping the stored checkpoint for a later epoch")
			return nil, 0, false, true
		}
		log.Warn().Err(err).Str("outcome", outcome).Msg(msg + "; replaying the whole input stream")
		return nil, 0, false, false
	}
	info, err := r.checkpointInfo(ctx, snaps, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		r.m.checkpoints.WithLabelValues(cpAbsent).Inc()
		log.Info().Msg("no checkpoint; replaying the whole input stream")
		return nil, 0, false, false
	}
	if err != nil {
		return reject(cpLoadError, err, "checkpoint info unavailable")
	}
	format, err := cfg.Format()
	if err != nil {
		return nil, 0, false, false
	}
	if got, want := info.Metadata[MetaFormat], CheckpointFormatTag(format, cfg.Mode); got != want {
		return reject(cpRejectedFormat, fmt.Errorf("checkpoint format %q, this relay %q", got, want), "checkpoint of another format")
	}
	seq, err := strconv.ParseUint(info.Metadata[MetaInputSequence], 10, 64)
	if err != nil {
		return reject(cpRejectedCorrupt, fmt.Errorf("input sequence: %w", err), "checkpoint metadata unreadable")
	}
	created, err := time.Parse(time.RFC3339Nano, info.Metadata[MetaInputStreamCreated])
	if err != nil {
		return reject(cpRejectedCorrupt, fmt.Errorf("input stream creation time: %w", err), "checkpoint metadata unreadable")
	}
	// A stream created after the checkpoint replaced the one it covers (a
	// deleted KVEVENTS is recreated): the checkpoint is still the best
	// state there is, and every event of the new stream came after it.
	recreated := created.Before(stream.created)
	if recreated {
		seq = 0
	}
	if !recreated && (!created.Equal(stream.created) || seq > stream.lastSeq) {
		return reject(cpRejectedStream, fmt.Errorf("checkpoint covers sequence %d of the stream created %s; the stream was created %s and ends at %d",
			seq, created.Format(time.RFC3339Nano), stream.created.Format(time.RFC3339Nano), stream.lastSeq), "checkpoint of another input stream")
	}
	start := time.Now()
	// The fetch gets the time its size needs at the slowest rate the relay
	// accepts for uploads: a fetch that stalls (its stream's leader lost)
	// ends there and the epoch replays the input instead of holding the
	// lease in the rebuilding state.
	lctx, cancel := context.WithTimeout(ctx, r.cfg.uploadTimeout(int(min(info.Size, uint64(math.MaxInt32)))))
	defer cancel()
	obj, err := snaps.Get(lctx, name)
	if err != nil {
		return reject(cpLoadError, err, "checkpoint fetch failed")
	}
	defer obj.Close()
	state, err = producer.RestoreState(obj, cfg)
	switch {
	case errors.Is(err, producer.ErrCheckpointFormat):
		return reject(cpRejectedFormat, err, "checkpoint of another format")
	case errors.Is(err, producer.ErrCheckpointOverBudget):
		return reject(cpRejectedBudget, err, "checkpoint exceeds the restore budget (written by a build that did not check it)")
	case errors.Is(err, producer.ErrCheckpoint), errors.Is(err, jetstream.ErrDigestMismatch):
		return reject(cpRejectedCorrupt, err, "checkpoint is corrupt")
	case err != nil:
		return reject(cpLoadError, err, "checkpoint fetch failed")
	}
	if recreated {
		r.m.checkpoints.WithLabelValues(cpRestoredNew).Inc()
		log.Warn().Time("checkpoint_stream_created", created).Time("stream_created", stream.created).
			Msg("input stream recreated since the checkpoint: restored it and replaying the new stream from its start; events the old stream held after the checkpoint are lost")
		return state, 0, true, false
	}
	r.m.checkpoints.WithLabelValues(cpRestored).Inc()
	log.Info().Uint64("input_sequence", seq).Uint64("bytes", info.Size).Dur("took_ms", time.Since(start)).
		Int("unique_blocks", state.UniqueBlocks()).Msg("exact state restored from the checkpoint")
	return state, seq, true, false
}

// Bounds of the checkpoint's metadata lookup: each attempt gets
// checkpointInfoAttempt, and attempts repeat until checkpointInfoBudget.
// An attempt can go unanswered for good (its request reached a server
// that then died, or the bucket's stream is electing a leader); a new one
// reaches the current leader.
const (
	checkpointInfoAttempt = 5 * time.Second
	checkpointInfoBudget  = 30 * time.Second
)

// checkpointInfo reads the checkpoint's metadata within its budget,
// attempt by attempt. An absent object ends it at once
// (jetstream.ErrObjectNotFound).
func (r *Relay) checkpointInfo(ctx context.Context, snaps jetstream.ObjectStore, name string) (*jetstream.ObjectInfo, error) {
	bctx, cancel := context.WithTimeout(ctx, r.cpInfoBudget)
	defer cancel()
	var info *jetstream.ObjectInfo
	pol := retry.Policy{Min: 250 * time.Millisecond, Max: 2 * time.Second, Attempt: r.cpInfoAttempt,
		OnRetry: func(_ int, err error, _ time.Duration) {
			r.log.Debug().Err(err).Str("object", name).Msg("checkpoint info unavailable; asking again")
		}}
	err := pol.Do(bctx, func(actx context.Context) error {
		if hook := r.beforeCheckpointLoad; hook != nil {
			if err := hook(actx); err != nil {
				return err
			}
		}
		var err error
		info, err = snaps.GetInfo(actx, name)
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return retry.Permanent(err)
		}
		return err
	})
	return info, err
}

// verifyTimeout bounds the lease read before a checkpoint.
const verifyTimeout = 3 * time.Second

// checkpoint stores the state with the input sequence it covers. It runs
// on the actor between two input messages, so the state is exactly the
// input up to e.inputSeq. The encoding streams through a pipe into the
// object store (no second in-memory copy of the state); the actor waits
// for the store meanwhile. A state the restore would refuse (over its
// budget) is not written, so the stored checkpoint is never replaced by
// one no restart can use. A failure is counted and logged and never ends
// the epoch: the previous checkpoint stays valid.
func (e *epochRun) checkpoint(ctx context.Context, trigger string) {
	if e.inputSeq == e.checkpointSeq {
		return // nothing applied since the last one
	}
	r := e.r
	if e.keepCheckpoint {
		r.m.checkpoints.WithLabelValues(cpKeptUnreadable).Inc()
		return
	}
	name, err := CheckpointObjectName(r.cfg.Domain, r.cfg.DC)
	if err != nil {
		return
	}
	if err := e.state.CheckpointFits(); err != nil {
		r.m.checkpoints.WithLabelValues(cpSkippedBudget).Inc()
		ev := r.log.Warn()
		if !e.overBudget {
			ev = r.log.Error() // once per spell; every skip is counted
		}
		e.overBudget = true
		ev.Err(err).Str("trigger", trigger).Uint64("input_sequence", e.inputSeq).Uint64("checkpoint_sequence", e.checkpointSeq).
			Msg("checkpoint not stored: the state's tables hold more emptied capacity than a restore may allocate; the stored checkpoint is kept")
		return
	}
	e.overBudget = false
	// Only the lease holder may write the pool's checkpoint: a relay that
	// lost its lease (and has not noticed yet) would overwrite its
	// successor's newer one with an older state. The lease record is read
	// from the bucket, not judged by the local view alone.
	if !e.lease.Held() {
		r.m.checkpoints.WithLabelValues(cpNotHeld).Inc()
		return
	}
	// A read that cannot be answered (the server is unreachable while
	// the relay stops) must not hold the actor, nor a graceful stop.
	vctx, cancel := context.WithTimeout(ctx, verifyTimeout)
	err = e.lease.Verify(vctx)
	cancel()
	if err != nil {
		r.m.checkpoints.WithLabelValues(cpNotHeld).Inc()
		r.log.Warn().Err(err).Str("trigger", trigger).Msg("checkpoint not stored: the lease could not be confirmed")
		return
	}
	start := time.Now()
	meta := jetstream.ObjectMeta{
		Name:        name,
		Description: "ckfrelay exact pool state checkpoint",
		Metadata: map[string]string{
			MetaInputSequence:      strconv.FormatUint(e.inputSeq, 10),
			MetaInputStreamCreated: e.inputStream.created.Format(time.RFC3339Nano),
			MetaFormat:             CheckpointFormatTag(e.state.Format(), e.state.Mode()),
		},
	}
	pr, pw := io.Pipe()
	stored := make(chan error, 1)
	go func() {
		_, err := e.snaps.Put(ctx, meta, pr)
		// Unblock the encoder if the store gave up early.
		pr.CloseWithError(errors.Join(err, io.ErrClosedPipe))
		stored <- err
	}()
	cw := &countingWriter{w: pw}
	encErr := e.state.Checkpoint(cw)
	pw.CloseWithError(encErr) // nil: the store sees EOF
	err = errors.Join(<-stored, encErr)
	took := time.Since(start)
	r.m.checkpointSeconds.Observe(took.Seconds())
	if err != nil {
		r.m.checkpoints.WithLabelValues(cpWriteError).Inc()
		r.log.Warn().Err(err).Str("trigger", trigger).Uint64("input_sequence", e.inputSeq).Msg("checkpoint not stored")
		return
	}
	e.checkpointSeq = e.inputSeq
	r.m.checkpoints.WithLabelValues(cpWritten).Inc()
	r.log.Info().Str("trigger", trigger).Uint64("input_sequence", e.inputSeq).Int64("bytes", cw.n).Dur("took_ms", took).
		Str("object", name).Msg("checkpoint stored")
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
