package relay

import (
	"strings"
	"time"
)

// ackMeta is the part of a JetStream message's metadata the input path
// reads. jetstream.Msg.Metadata allocates its result for every message;
// parseAckReply reads the same fields from the reply subject in place.
type ackMeta struct {
	streamSeq uint64
	pending   uint64
	timestamp time.Time
}

// parseAckReply parses a JetStream ack subject as nats.go's Metadata does:
//
//	v1: $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>
//	v2: $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>[.<token>...]
//
// exactly 9 tokens (v1) or at least 11 (v2), and a number that is not all
// ASCII digits reads as 0. ok is false for any other subject.
func parseAckReply(reply string) (m ackMeta, ok bool) {
	const prefix = "$JS.ACK."
	if !strings.HasPrefix(reply, prefix) {
		return ackMeta{}, false
	}
	// Token indexes after the prefix's two: v1 lacks the domain and the
	// account hash.
	seqAt, tmAt, pendingAt := 3, 5, 6
	switch n := strings.Count(reply, ".") + 1; {
	case n == 9:
	case n >= 11:
		seqAt, tmAt, pendingAt = 5, 7, 8
	default:
		return ackMeta{}, false
	}
	var tm uint64
	rest := reply[len(prefix):]
	for i := 0; i <= pendingAt; i++ {
		var tok string
		tok, rest, _ = strings.Cut(rest, ".")
		switch i {
		case seqAt:
			m.streamSeq = ackNum(tok)
		case tmAt:
			tm = ackNum(tok)
		case pendingAt:
			m.pending = ackNum(tok)
		}
	}
	m.timestamp = time.Unix(0, int64(tm))
	return m, true
}

// ackNum is nats.go's ParseNum: the decimal value of an all-digit token,
// 0 for an empty token or any other byte (overflow wraps, as there).
func ackNum(s string) uint64 {
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}
