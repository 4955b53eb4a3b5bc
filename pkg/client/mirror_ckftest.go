//go:build ckftest

package client

import "github.com/ckfrelay/ckfrelay/pkg/follow"

// MirrorServiceForTest is the lane service behind m for domain, for
// fault-injection tests (ckftest builds only).
func MirrorServiceForTest(m *Mirror, domain string) (*follow.Service, bool) {
	return m.reg.Service(domain)
}
