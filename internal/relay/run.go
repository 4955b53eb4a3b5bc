package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/backoff"
	"github.com/ckfrelay/ckfrelay/pkg/ctxwait"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/pkg/retry"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
)

// Run registers the pool's lane, then loops: acquire the producer lease
// (standby while another relay holds it), rebuild the exact state (restore
// the pool's checkpoint if usable, then replay the input stream after it),
// publish a barrier snapshot under the new epoch and serve
// until the lease is lost or ctx ends. It returns nil when ctx ends.
//
// After an epoch ends in failure, the next attempt first sets everything
// up again (streams, object store, lease bucket, lane registration), so a
// deleted resource is recreated, and it waits a backoff that doubles while
// failures repeat (RestartBackoffMin..Max): a resource that stays broken
// costs one epoch per backoff period, never a hot loop.
func (r *Relay) Run(ctx context.Context) error {
	defer r.setState(StateStopped)
	sub, err := r.subscribeWorkerLoads()
	if err != nil {
		return fmt.Errorf("relay: subscribe to worker load reports: %w", err)
	}
	defer sub.Unsubscribe() //nolint:errcheck // the connection may be closed already
	var (
		res   *streams.Resources
		coord *lease.Coordinator
		lane  int
	)
	lo, hi := r.cfg.restartBackoff()
	bo := backoff.New(lo, hi)
	first := true
	for ctx.Err() == nil {
		if res == nil {
			var err error
			res, coord, _, err = r.setup(ctx)
			if err != nil {
				if first && ctx.Err() == nil && isPermanentSetup(err) {
					return err
				}
				if ctx.Err() != nil || !ctxwait.Sleep(ctx, bo.Next()) {
					break
				}
				continue
			}
		}
		first = false
		r.setState(StateStandby)
		// The session owns the keepalive goroutine for the whole epoch,
		// the final checkpoint after a shutdown included.
		sess, err := coord.NewSession(ctx, r.cfg.Domain, r.cfg.DC, r.cfg.Instance, r.cfg.LeaseTTL,
			lease.WithReleaseTimeout(leaseReleaseTimeout))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			wait := r.cfg.LeaseTTL / 3
			var le *lease.Error
			switch {
			case errors.As(err, &le) && errors.Is(err, lease.ErrLeaseHeld):
				r.clearFault(FaultEpochExhausted)
				r.log.Info().Str("holder_instance", le.Holder).Uint64("holder_epoch", le.Epoch).Msg("standby: lease held by another relay")
			case errors.Is(err, lease.ErrEpochExhausted):
				// Never wrap: stand by and say so until an operator repairs
				// the epoch key.
				r.setFault(FaultEpochExhausted, err.Error())
				wait = bo.Next()
			default:
				r.log.Warn().Err(err).Msg("lease acquire failed")
				res = nil // the lease bucket may be gone: set up again
				wait = bo.Next()
			}
			if !ctxwait.Sleep(ctx, wait) {
				break
			}
			continue
		}
		r.clearFault(FaultEpochExhausted)
		began := time.Now()
		l := sess.Lease()
		// A lane its previous holder retired is live again under this
		// lease (a standby took over a pool another relay's file dropped).
		if lane, err = coord.Register(ctx, r.cfg.Domain, r.cfg.DC, r.pool); err == nil {
			err = r.serve(ctx, coord, res, lane, l)
		}
		if ctx.Err() != nil && r.retiring.Load() {
			r.retireLane(coord, l)
		}
		if rerr := sess.Close(context.WithoutCancel(ctx)); rerr != nil {
			// The lease has ended here all the same; the stored record lapses
			// at its TTL, so a standby waits that long before taking over.
			r.log.Warn().Err(rerr).Uint64("epoch", l.Epoch()).Dur("lease_ttl_ms", r.cfg.LeaseTTL).
				Msg("lease release failed; it lapses at its expiry")
		}
		r.m.epoch.Set(0)
		if ctx.Err() != nil {
			break
		}
		// No longer publishing: say so while set-up and the lease are
		// retried (e.g. for the whole of a WAN cut), not "active".
		r.setState(StateStandby)
		if time.Since(began) > 2*hi {
			bo.Reset() // it served a good while: this failure starts a new series
		}
		wait := bo.Next()
		r.log.Warn().Err(err).Uint64("epoch", l.Epoch()).Dur("retry_in_ms", wait).Msg("stopped publishing under this epoch")
		res = nil
		if !ctxwait.Sleep(ctx, wait) {
			break
		}
	}
	return nil
}

// retireLane marks the lane retired while l, the lease it publishes under,
// is still held, so a standby that acquires the lease afterwards revives it.
func (r *Relay) retireLane(coord *lease.Coordinator, l *lease.Lease) {
	if l.Err() != nil {
		return // lost meanwhile: another relay may serve the pool now
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaseReleaseTimeout)
	defer cancel()
	lane, err := coord.Retire(ctx, r.cfg.Domain, r.cfg.DC, r.pool)
	if err != nil {
		r.log.Warn().Err(err).Msg("marking the lane retired failed; indexers keep it as a stale lane")
		return
	}
	r.log.Info().Int("lane", lane).Msg("lane retired: the pool was removed on purpose")
}

// setup ensures the JetStream resources (the input stream on InputJS when
// set) and the lease bucket, creating what is missing, and registers the
// pool's lane. It retries with backoff while NATS or the JetStream holding
// them is unreachable (a hub started after its DCs answers "no
// responders" until it is up); every failed step is counted and reported
// as the setup fault. A lane map that cannot take this pool is permanent.
func (r *Relay) setup(ctx context.Context) (res *streams.Resources, coord *lease.Coordinator, lane int, err error) {
	pol := r.cfg.Setup
	user := pol.OnRetry
	pol.OnRetry = func(attempt int, err error, wait time.Duration) {
		r.m.setupRetries.Inc()
		r.log.Warn().Err(err).Int("attempt", attempt).Dur("retry_in_ms", wait).Msg("start-up step failed; retrying")
		if user != nil {
			user(attempt, err, wait)
		}
	}
	fail := func(step string, err error) error {
		if ctx.Err() == nil {
			r.m.setupFailures.WithLabelValues(step).Inc()
			r.setFault(FaultSetup, step+": "+err.Error())
		}
		if isPermanentSetup(err) {
			return retry.Permanent(err)
		}
		return err
	}
	err = pol.Do(ctx, func(ctx context.Context) error {
		var err error
		if r.cfg.InputJS == nil {
			res, err = streams.Ensure(ctx, r.js, r.cfg.Streams)
		} else {
			res, err = streams.EnsureLanes(ctx, r.js, r.cfg.Streams)
			if err == nil {
				res.Events, err = streams.EnsureEvents(ctx, r.cfg.InputJS, r.cfg.Streams)
			}
		}
		if err != nil {
			return fail("streams", err)
		}
		if coord, err = lease.New(ctx, r.js, lease.WithReplicas(max(r.cfg.Streams.Replicas, 1))); err != nil {
			return fail("lease_bucket", fmt.Errorf("relay: lease coordinator: %w", err))
		}
		if lane, err = coord.Register(ctx, r.cfg.Domain, r.cfg.DC, r.pool); err != nil {
			return fail("register", fmt.Errorf("relay: register lane: %w", err))
		}
		return nil
	})
	if err != nil {
		return nil, nil, -1, err
	}
	r.clearFault(FaultSetup)
	if st := r.Status(); st.Lane != lane {
		r.update(func(s *Status) { s.Lane = lane })
		r.log = r.baseLog.With().Int("lane", lane).Logger()
		r.log.Info().Msg("lane registered")
	}
	return res, coord, lane, nil
}

// isPermanentSetup reports a setup error that retrying cannot cure (the
// lane map has no room or names this DC for another pool): Run returns it
// on the first attempt, as before.
func isPermanentSetup(err error) bool {
	return errors.Is(err, lease.ErrNoFreeLane) || errors.Is(err, lease.ErrLaneConflict) ||
		errors.Is(err, lease.ErrInvalidName) || errors.Is(err, lease.ErrInvalidOption)
}

// leaseReleaseTimeout bounds the release of a lease when an epoch ends, so
// a standby can take over at once instead of after the TTL.
const leaseReleaseTimeout = 2 * time.Second
