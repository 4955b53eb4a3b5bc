package lease

import "fmt"

// MaxNameLen bounds domain and DC names: they appear in KV keys and in the
// lane subjects ckf.<domain>.<dc>.*, so they stay short.
const MaxNameLen = 64

// Key layout in the bucket. Each %s is one validated name token.
const (
	lanesKeyT   = "lanes.%s"      // lane map of a domain
	leaseKeyT   = "lease.%s.%s"   // producer lease of a pool
	epochKeyT   = "epoch.%s.%s"   // monotonic epoch counter of a pool; never deleted
	snapReqKeyT = "snapreq.%s.%s" // snapshot request counter of a pool
)

// ValidateName reports whether name can be one NATS subject / KV key token:
// 1..MaxNameLen characters of [A-Za-z0-9_-]. Dots, wildcards, whitespace and
// everything else are rejected with ErrInvalidName.
func ValidateName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return newError(ErrInvalidName, "", "", fmt.Sprintf("%q must be 1..%d characters", name, MaxNameLen))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			continue
		}
		return newError(ErrInvalidName, "", "", fmt.Sprintf("%q has %q at %d; want [A-Za-z0-9_-]", name, c, i))
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
