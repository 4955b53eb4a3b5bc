package relay

import "github.com/ckfrelay/ckfrelay/pkg/wire"

// SetBeforePublish installs a hook run before every lane publish.
func SetBeforePublish(r *Relay, fn func(kind wire.MessageKind) error) { r.beforePublish = fn }
