package queryapi

import (
	"fmt"
	"strings"

	"github.com/ckfrelay/ckfrelay/pkg/api"
)

// bodyKind is how a match body is decoded.
type bodyKind uint8

const (
	bodyJSON bodyKind = iota
	bodySeqHashes
)

// maxSeqHashesBytes is the largest api.ContentTypeSeqHashes body: MaxBlocks
// hashes. A longer one is over a size limit (413), like a JSON body over
// MaxRequestBytes, not malformed.
const maxSeqHashesBytes = 8 * api.MaxBlocks

// classifyBody maps a request's Content-Type to its decoder:
//   - none, application/json and application/x-www-form-urlencoded (what
//     `curl -d` sends unless told otherwise) are JSON; a charset parameter,
//     if any, must be utf-8 (RFC 8259);
//   - api.ContentTypeSeqHashes, with any parameters, is the binary body.
//
// Anything else is refused with a *api.RequestError the caller answers
// 415, rather than being read as JSON and failing with a parse error that
// hides the real mistake. It does not allocate on the accepted path.
func classifyBody(contentType string) (bodyKind, error) {
	mt, params, _ := strings.Cut(contentType, ";")
	mt = strings.TrimSpace(mt)
	switch {
	case equalFoldASCII(mt, api.ContentTypeSeqHashes):
		return bodySeqHashes, nil
	case mt == "", equalFoldASCII(mt, "application/json"), equalFoldASCII(mt, "application/x-www-form-urlencoded"):
		if cs, ok := charset(params); ok && !equalFoldASCII(cs, "utf-8") {
			return bodyJSON, &api.RequestError{Reason: fmt.Sprintf("charset %q is not accepted: JSON bodies are utf-8", cs)}
		}
		return bodyJSON, nil
	}
	return bodyJSON, &api.RequestError{Reason: fmt.Sprintf("content type %q is not accepted: send application/json (or no Content-Type) or %s", mt, api.ContentTypeSeqHashes)}
}

// charset returns the value of the charset parameter in params (the part of
// a Content-Type after its first ';').
func charset(params string) (string, bool) {
	for params != "" {
		var p string
		p, params, _ = strings.Cut(params, ";")
		k, v, ok := strings.Cut(p, "=")
		if ok && equalFoldASCII(strings.TrimSpace(k), "charset") {
			return strings.Trim(strings.TrimSpace(v), `"`), true
		}
	}
	return "", false
}

// maxBodyFor is the body limit of a request of kind k under the
// endpoint's limit.
func maxBodyFor(k bodyKind, limit int64) int64 {
	if k == bodySeqHashes && limit > maxSeqHashesBytes {
		return maxSeqHashesBytes
	}
	return limit
}

// equalFoldASCII compares under ASCII case folding only: media types and
// parameter names are ASCII (RFC 9110), and Unicode folding would let
// "ſ" (U+017F) stand for "s".
func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
