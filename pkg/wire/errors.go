package wire

import (
	"errors"
	"fmt"
)

// ErrorKind classifies why a message was refused. Each kind is itself an
// error, so errors.Is(err, ErrTruncated) matches any *DecodeError or
// *EncodeError of that kind.
type ErrorKind uint8

const (
	// ErrTruncated: the input ended inside a value.
	ErrTruncated ErrorKind = iota + 1
	// ErrTrailingBytes: bytes follow a complete message.
	ErrTrailingBytes
	// ErrVersion: the wire version (or snapshot body version) is not supported.
	ErrVersion
	// ErrKind: the message kind is not the one being decoded, or unknown.
	ErrKind
	// ErrTooLarge: a message, array, bin or string exceeds its limit.
	ErrTooLarge
	// ErrMalformed: wrong msgpack type, element count, non-minimal encoding,
	// invalid string, bad length multiple, unordered images and similar.
	ErrMalformed
	// ErrUnknownEnum: an enum field (identity source) has an unknown value.
	ErrUnknownEnum
	// ErrFormatMismatch: the CKF format is unsupported or differs from the
	// one it must equal (identity format vs. bucket count, body vs. marker).
	ErrFormatMismatch
	// ErrOutOfRange: an image bucket is not below the bucket count.
	ErrOutOfRange
	// ErrDuplicateBucket: two images of one delta name the same bucket.
	ErrDuplicateBucket
	// ErrSequence: a delta's sequence is not base_sequence+1.
	ErrSequence
	// ErrChecksum: a snapshot body's checksum, digest or size does not match.
	ErrChecksum
)

var errorKindNames = [...]string{
	ErrTruncated:       "truncated",
	ErrTrailingBytes:   "trailing bytes",
	ErrVersion:         "unsupported version",
	ErrKind:            "wrong message kind",
	ErrTooLarge:        "too large",
	ErrMalformed:       "malformed",
	ErrUnknownEnum:     "unknown enum value",
	ErrFormatMismatch:  "format mismatch",
	ErrOutOfRange:      "out of range",
	ErrDuplicateBucket: "duplicate bucket",
	ErrSequence:        "non-contiguous sequence",
	ErrChecksum:        "checksum mismatch",
}

func (k ErrorKind) String() string {
	if int(k) < len(errorKindNames) && errorKindNames[k] != "" {
		return errorKindNames[k]
	}
	return fmt.Sprintf("ErrorKind(%d)", uint8(k))
}

func (k ErrorKind) Error() string { return "wire: " + k.String() }

// DecodeError reports why input was refused. Field is the dotted path of the
// offending element (for example "delta.images" or
// "identity.format.bucket_count"); Detail gives the numbers.
type DecodeError struct {
	Kind   ErrorKind
	Field  string
	Detail string
}

func (e *DecodeError) Error() string { return formatError("decode", e.Kind, e.Field, e.Detail) }

// Unwrap returns the Kind so errors.Is(err, ErrMalformed) works.
func (e *DecodeError) Unwrap() error { return e.Kind }

// EncodeError reports why a message could not be encoded: it would break the
// rules a decoder enforces. Fields as in DecodeError.
type EncodeError struct {
	Kind   ErrorKind
	Field  string
	Detail string
}

func (e *EncodeError) Error() string { return formatError("encode", e.Kind, e.Field, e.Detail) }

// Unwrap returns the Kind.
func (e *EncodeError) Unwrap() error { return e.Kind }

func formatError(op string, k ErrorKind, field, detail string) string {
	s := "wire: " + op
	if field != "" {
		s += " " + field
	}
	s += ": " + k.String()
	if detail != "" {
		s += ": " + detail
	}
	return s
}

func decodeErr(k ErrorKind, field, format string, args ...any) *DecodeError {
	return &DecodeError{Kind: k, Field: field, Detail: fmt.Sprintf(format, args...)}
}

// asEncodeError turns a validation failure (reported as *DecodeError by the
// shared checks) into the encoder's error type.
func asEncodeError(err error) error {
	var de *DecodeError
	if errors.As(err, &de) {
		return &EncodeError{Kind: de.Kind, Field: de.Field, Detail: de.Detail}
	}
	return err
}

// ErrInvalidToken is wrapped by every *TokenError.
var ErrInvalidToken = errors.New("wire: invalid subject token")

// TokenError reports a domain, DC or worker name that cannot be a NATS
// subject token.
type TokenError struct {
	What   string // "domain", "dc", ...
	Token  string
	Reason string
}

func (e *TokenError) Error() string {
	return fmt.Sprintf("wire: invalid %s name %q: %s", e.What, e.Token, e.Reason)
}

// Unwrap returns ErrInvalidToken.
func (e *TokenError) Unwrap() error { return ErrInvalidToken }
