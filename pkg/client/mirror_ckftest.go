//go:build ckftest

package client

import "github.com/ckfrelay/ckfrelay/internal/indexer"

// MirrorServiceForTest is the indexer service behind m, for fault-injection
// tests (ckftest builds only).
func MirrorServiceForTest(m *Mirror) *indexer.Service { return m.svc }
