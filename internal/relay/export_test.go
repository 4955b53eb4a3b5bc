package relay

import (
	"context"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// SetBeforePublish installs a hook run before every lane publish.
func SetBeforePublish(r *Relay, fn func(kind wire.MessageKind) error) { r.beforePublish = fn }

// SetBeforeCheckpointLoad installs a hook run before each attempt to read
// the checkpoint's metadata at the start of an epoch, with the attempt's
// context; an error stands for a failed attempt.
func SetBeforeCheckpointLoad(r *Relay, fn func(ctx context.Context) error) {
	r.beforeCheckpointLoad = fn
}

// SetCheckpointInfoBounds sets the time of one checkpoint metadata attempt
// and of all of them.
func SetCheckpointInfoBounds(r *Relay, attempt, budget time.Duration) {
	r.cpInfoAttempt, r.cpInfoBudget = attempt, budget
}

// SetRebuildTarget installs a hook run on the actor once a rebuild knows
// the last input sequence it waits for, before it applies any message.
func SetRebuildTarget(r *Relay, fn func(target uint64)) { r.rebuildTarget = fn }

// SetClock replaces the relay's clock (load windows, refusal window)
// before Run.
func SetClock(r *Relay, now func() time.Time) { r.now = now }

// SetOnCut installs a hook run on the actor at every cut of the
// publication window, empty or not.
func SetOnCut(r *Relay, fn func()) { r.onCut = fn }
