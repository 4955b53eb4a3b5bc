package lease

import (
	"errors"
	"fmt"

	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// MaxNameLen bounds domain and DC names (wire.MaxNameBytes): they appear in
// KV keys and in the lane subjects ckf.<domain>.<dc>.*, so they stay short.
const MaxNameLen = wire.MaxNameBytes

// Key layout in the bucket. Each %s is one validated name token.
const (
	lanesKeyT   = "lanes.%s"      // lane map of a domain
	leaseKeyT   = "lease.%s.%s"   // producer lease of a pool
	epochKeyT   = "epoch.%s.%s"   // monotonic epoch counter of a pool; never deleted
	snapReqKeyT = "snapreq.%s.%s" // snapshot request counter of a pool
)

// ValidateName reports whether name can be a domain or DC name
// (wire.ValidateName: 1..MaxNameLen characters of [A-Za-z0-9_-]); dots,
// wildcards, whitespace and everything else are rejected with
// ErrInvalidName.
func ValidateName(name string) error {
	var te *wire.TokenError
	if err := wire.ValidateName("name", name); errors.As(err, &te) {
		return newError(ErrInvalidName, "", "", fmt.Sprintf("%q %s", name, te.Reason))
	}
	return nil
}

func validatePool(domain, dc string) error {
	if err := ValidateName(domain); err != nil {
		e := err.(*Error)
		e.Detail = "domain " + e.Detail
		return e
	}
	if err := ValidateName(dc); err != nil {
		e := err.(*Error)
		e.Detail = "dc " + e.Detail
		return e
	}
	return nil
}
