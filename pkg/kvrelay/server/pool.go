package server

import (
	"errors"
	"fmt"
	"time"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
)

// poolOf is the pool part of a producer key (what "pool active" compares).
func poolOf(k kvrelay.ProducerKey) kvrelay.ProducerKey {
	return kvrelay.ProducerKey{IdentityVersion: k.IdentityVersion, CacheSemantics: k.CacheSemantics, CacheSource: k.CacheSource,
		RoutingScope: k.RoutingScope, RoutingSource: k.RoutingSource, DcID: k.DcID}
}

// SubscribeKvPool streams one producer generation (§4): admission in the
// order of §4.1, the snapshot chunks, then contiguous deltas and heartbeats
// until the generation ends, the subscriber lags, the client leaves or the
// server shuts down.
func (s *Server) SubscribeKvPool(req *kvrelayv1.SubscribeKvPoolRequest, ss kvrelayv1.KvEventRelay_SubscribeKvPoolServer) error {
	const rpc = "SubscribeKvPool"
	ctx := ss.Context()
	fail := func(err error) error { return s.streamFail(rpc, ss, req.GetSubscriberId(), err) }
	key, err := kvrelay.ValidateSubscribeKvPoolRequest(req)
	if err != nil {
		return fail(err)
	}
	release, err := admit(&s.poolStreams, "pool stream")
	if err != nil {
		return fail(err)
	}
	defer release()
	if s.stopping.Load() {
		return fail(fmt.Errorf("relay shutting down: %w", kvrelay.ErrPublicationUnavailable))
	}
	sp, gen, ok := s.lookup(key)
	switch {
	case !ok:
		return fail(fmt.Errorf("pool %016x is not published by this relay: %w", key.DcID, kvrelay.ErrPoolNotFound))
	case gen.Key != key:
		return fail(fmt.Errorf("pool is published as incarnation %d layout %d: %w", gen.Key.ProducerIncarnation, gen.Key.LayoutGeneration, kvrelay.ErrProducerChanged))
	}
	releasePool, err := admit(&sp.subs, "subscribers per pool")
	if err != nil {
		return fail(err)
	}
	defer releasePool()
	feed, err := sp.pub.Subscribe(ctx, key, s.cfg.Queue)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fail(err)
	}
	defer feed.Close()
	defer s.m.stream(rpc)()
	defer s.m.poolStream(sp.name)()
	err = s.streamPool(ss, sp, gen, feed)
	var c kvrelay.Condition
	switch {
	case errors.As(err, &c):
		return fail(err)
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return err // a Send failure: the transport is gone
}

// streamPool sends the snapshot of feed, then its deltas and heartbeats. It
// returns a kvrelay Condition when the stream must end with a status, or a
// Send error.
func (s *Server) streamPool(ss kvrelayv1.KvEventRelay_SubscribeKvPoolServer, sp *servedPool, gen Generation, feed *Feed) error {
	ctx := ss.Context()
	f := gen.Key.Format()
	dc := gen.Key.DcID
	producer := gen.Descriptor.Producer
	frame := func(kind kvrelayv1.FilterUpdateKind, base, seq uint64, payload []byte) *kvrelayv1.FilterUpdate {
		return &kvrelayv1.FilterUpdate{
			ProtocolVersion: kvrelayv1.ProtocolVersion, Relay: s.relay, Producer: producer,
			BaseSequence: base, Sequence: seq, SendTsUs: uint64(time.Now().UnixMicro()),
			Kind: kind, Payload: payload, ContractMarker: kvrelayv1.ContractMarker,
		}
	}
	last := feed.Sequence
	if uint64(len(feed.Words)) != f.BucketCount() {
		return fmt.Errorf("snapshot of %d words for %d buckets: %w", len(feed.Words), f.BucketCount(), kvrelay.ErrInvalidPublication)
	}
	for i := range f.ChunkCount() {
		// A fresh buffer per chunk: grpc-go forbids touching a sent message.
		payload, err := cbi1.AppendSnapshotChunk(nil, f, dc, last, feed.Words, i)
		if err != nil {
			return fmt.Errorf("snapshot chunk %d: %w: %w", i, err, kvrelay.ErrInternal)
		}
		if err := s.sendChunk(ss, frame(kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_SNAPSHOT_CHUNK, last, last, payload)); err != nil {
			return err
		}
	}
	feed.Words = nil // sent: let it go
	hb := time.NewTimer(s.cfg.PoolHeartbeat)
	defer hb.Stop()
	reset := func() {
		if !hb.Stop() {
			select {
			case <-hb.C:
			default:
			}
		}
		hb.Reset(s.cfg.PoolHeartbeat)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return s.endErr(ctx)
		case <-sp.removed:
			return errRemoved(sp.name)
		case <-hb.C:
			if err := ss.Send(frame(kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_HEARTBEAT, last, last, nil)); err != nil {
				return err
			}
			hb.Reset(s.cfg.PoolHeartbeat)
		case <-feed.Ready():
			for {
				d, ok, err := feed.Next()
				if err != nil {
					return err
				}
				if !ok {
					break
				}
				if d.BaseSequence != last || d.Sequence != last+1 {
					return fmt.Errorf("delta %d→%d after sequence %d: %w", d.BaseSequence, d.Sequence, last, kvrelay.ErrInvalidPublication)
				}
				payload, err := cbi1.AppendDelta(nil, f, dc, d.BaseSequence, d.Sequence, d.Images)
				if err != nil {
					return fmt.Errorf("delta %d: %w: %w", d.Sequence, err, kvrelay.ErrInvalidPublication)
				}
				if err := ss.Send(frame(kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_DELTA, d.BaseSequence, d.Sequence, payload)); err != nil {
					return err
				}
				last = d.Sequence
				reset()
			}
		}
	}
}

// sendChunk sends one snapshot chunk, giving up after SnapshotProgress
// (§4.3): a client that stopped reading its bootstrap must not hold a
// pool-stream slot and the snapshot's memory until it disconnects. The
// Send runs on its own goroutine, the only one sending on ss while it
// runs; on a timeout the handler returns, which ends the stream, and that
// Send then fails and the goroutine exits.
func (s *Server) sendChunk(ss kvrelayv1.KvEventRelay_SubscribeKvPoolServer, u *kvrelayv1.FilterUpdate) error {
	sent := make(chan error, 1)
	go func() { sent <- ss.Send(u) }()
	t := time.NewTimer(s.cfg.SnapshotProgress)
	defer t.Stop()
	select {
	case err := <-sent:
		return err
	case <-t.C:
		return fmt.Errorf("no snapshot chunk taken for %s: %w", s.cfg.SnapshotProgress, kvrelay.ErrSnapshotProgressTimeout)
	}
}
