// Package archcheck holds the repository's layout rules as tests: the
// arrows between the public packages (pkg/) and the services (internal/)
// point one way only, so a change that makes pkg/ lean on internal/
// fails `go test ./...` instead of waiting for a reader to notice.
package archcheck
