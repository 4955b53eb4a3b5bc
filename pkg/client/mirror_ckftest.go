//go:build ckftest

package client

import "github.com/ckfrelay/ckfrelay/internal/indexer"

// MirrorServiceForTest is the indexer service behind m for domain, for
// fault-injection tests (ckftest builds only).
func MirrorServiceForTest(m *Mirror, domain string) (*indexer.Service, bool) {
	if m.reg != nil {
		return m.reg.Service(domain)
	}
	return m.svc, domain == m.svc.Domain()
}
