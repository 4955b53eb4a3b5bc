package relay

import "github.com/ckfrelay/ckfrelay/pkg/wire"

// SetBeforePublish installs a hook run before every lane publish.
func SetBeforePublish(r *Relay, fn func(kind wire.MessageKind) error) { r.beforePublish = fn }

// SetBeforeCheckpointLoad installs a hook run before the checkpoint is
// read at the start of an epoch; an error stands for a failed read.
func SetBeforeCheckpointLoad(r *Relay, fn func() error) { r.beforeCheckpointLoad = fn }

// SetRebuildTarget installs a hook run on the actor once a rebuild knows
// the last input sequence it waits for, before it applies any message.
func SetRebuildTarget(r *Relay, fn func(target uint64)) { r.rebuildTarget = fn }
