package lease

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// snapRequestRecord is the stored snapshot request state of one pool.
type snapRequestRecord struct {
	Counter     uint64 `json:"counter"`
	Requester   string `json:"requester"`
	RequestedAt int64  `json:"requested_at"`
}

func snapReqKey(domain, dc string) string { return fmt.Sprintf(snapReqKeyT, domain, dc) }

// RequestSnapshot asks the producer of pool (domain, dc) for a fresh
// barrier snapshot, e.g. because retention cut a gap a consumer cannot
// bridge. It increments the pool's request counter by compare-and-set and
// records the requester. Fails with ErrInvalidName, ErrInvalidArgument
// (empty requester), ErrCorruptRecord or ErrContention.
func (c *Coordinator) RequestSnapshot(ctx context.Context, domain, dc, requester string) error {
	if err := validatePool(domain, dc); err != nil {
		return err
	}
	if requester == "" {
		return newError(ErrInvalidArgument, domain, dc, "empty requester")
	}
	key := snapReqKey(domain, dc)
	for range c.set.casAttempts {
		data, rev, present, err := c.latest(ctx, key)
		if err != nil {
			return err
		}
		var rec snapRequestRecord
		if present {
			if err := json.Unmarshal(data, &rec); err != nil {
				return corrupt(domain, dc, key, err)
			}
		}
		rec = snapRequestRecord{Counter: rec.Counter + 1, Requester: requester, RequestedAt: c.now().UnixNano()}
		_, err = c.casPut(ctx, key, rec, rev)
		if isConflict(err) {
			continue
		}
		return err
	}
	return contention(domain, dc, "snapshot request", c.set.casAttempts)
}

// WatchSnapshotRequests signals the producer of pool (domain, dc) when a
// snapshot is requested after the watch started. Requests coalesce: the
// channel holds at most one pending signal, however many requests arrive
// before the producer reads it, and one snapshot answers them all. Requests
// made before the watch are not replayed; a producer publishes a barrier
// snapshot when it takes the lease anyway, so it should start watching before
// that snapshot. The watch goroutine stops and the channel closes when ctx
// ends. Fails with ErrInvalidName or a watch error.
func (c *Coordinator) WatchSnapshotRequests(ctx context.Context, domain, dc string) (<-chan struct{}, error) {
	if err := validatePool(domain, dc); err != nil {
		return nil, err
	}
	w, err := c.kv.Watch(ctx, snapReqKey(domain, dc), jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("lease: watch snapshot requests of %s/%s: %w", domain, dc, err)
	}
	out := make(chan struct{}, 1)
	seen := c.snapReqSeen
	go func() {
		defer close(out)
		defer stopWatcher(w)
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue
				}
				// A request whose body does not decode is still a request.
				select {
				case out <- struct{}{}:
				default: // one signal is already pending
				}
				if seen != nil {
					var rec snapRequestRecord
					_ = json.Unmarshal(e.Value(), &rec)
					seen(rec.Counter)
				}
			}
		}
	}()
	return out, nil
}
