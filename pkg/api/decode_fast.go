package api

import (
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// decodeFast decodes the shapes routers send — {"sequence_hashes":[...]},
// {"local_hashes":[...]}, or tokens with block_size in either order, with
// lora_name, cache_namespace and eagle before the tokens — in one pass over
// the whole body. It only ever succeeds: on anything it is
// not certain about (other fields, null, escapes, duplicate keys, numbers
// that are not plain unsigned integers, limits reached, syntax errors) it
// returns false and the caller runs the streaming decoder, which owns
// every error message. So its answers are exactly the streaming decoder's
// (FuzzDecodeFastAgreesWithTheStreamingDecoder holds it to that).
func decodeFast(b []byte) (Query, bool) { return decodeFastRoute(b, nil) }

// decodeFastRoute is decodeFast for a route request: with ro set it also
// takes input_tokens and output_tokens as plain unsigned integers (any
// other route option goes to the streaming decoder).
func decodeFastRoute(b []byte, ro *RouteOptions) (Query, bool) {
	s := fastScanner{b: b}
	var haveIn, haveOut bool
	if !s.eat('{') {
		return Query{}, false
	}
	var (
		q                    Query
		tokens               fastScanner // positioned at the token array
		nTokens              int
		haveTokens, haveBS   bool
		haveLocals, haveSeqs bool
		haveModel            bool
		blockSize            uint64
		// The salts are taken only before the tokens: after them the
		// streaming decoder may refuse them (once block_size was given).
		lora, ns         []byte
		haveLora, haveNS bool
		eagle, haveEagle bool
	)
	for first := true; ; first = false {
		if s.eat('}') {
			if first {
				return Query{}, false
			}
			break
		}
		if !first && !s.eat(',') {
			return Query{}, false
		}
		key, ok := s.key()
		if !ok {
			return Query{}, false
		}
		switch string(key) { // compared without a copy
		case "sequence_hashes":
			if haveSeqs || haveLocals || haveTokens || haveBS {
				return Query{}, false
			}
			haveSeqs = true
			v, ok := u64Array[ckf.SequenceHash](&s, MaxBlocks)
			if !ok {
				return Query{}, false
			}
			q.Seqs = v
		case "local_hashes":
			if haveSeqs || haveLocals || haveTokens || haveBS {
				return Query{}, false
			}
			haveLocals = true
			v, ok := u64Array[ckf.LocalBlockHash](&s, MaxBlocks)
			if !ok {
				return Query{}, false
			}
			q.Locals = v
		case "tokens":
			if haveTokens || haveSeqs || haveLocals {
				return Query{}, false
			}
			haveTokens = true
			// The tokens are only validated and counted here, and hashed
			// from the body once block_size is known: materialising them
			// would cost several times the body.
			tokens = s
			n, ok := u32ArrayLen(&s, MaxBlocks*MaxBlockSize)
			if !ok {
				return Query{}, false
			}
			nTokens = n
		case "model", "domain":
			if haveModel {
				return Query{}, false
			}
			haveModel = true
			v, ok := s.str(MaxModelBytes)
			if !ok || len(v) == 0 {
				return Query{}, false
			}
			q.Model = string(v)
		case "block_size":
			if haveBS || haveSeqs || haveLocals {
				return Query{}, false
			}
			haveBS = true
			v, ok := s.uint()
			if !ok || v == 0 || v > MaxBlockSize {
				return Query{}, false
			}
			blockSize = v
		case "lora_name", "cache_namespace":
			isLora := string(key) == "lora_name"
			if haveTokens || (isLora && haveLora) || (!isLora && haveNS) {
				return Query{}, false
			}
			v, ok := s.str(len(s.b))
			if !ok {
				return Query{}, false
			}
			if isLora {
				haveLora, lora = true, v
			} else {
				haveNS, ns = true, v
			}
		case "eagle":
			if haveTokens || haveEagle {
				return Query{}, false
			}
			v, ok := s.boolean()
			if !ok {
				return Query{}, false
			}
			haveEagle, eagle = true, v
		case "input_tokens", "output_tokens":
			in := string(key) == "input_tokens"
			if ro == nil || (in && haveIn) || (!in && haveOut) {
				return Query{}, false
			}
			v, ok := s.uint()
			if !ok || v > MaxRouteTokens {
				return Query{}, false
			}
			if in {
				haveIn, ro.InputTokens = true, int(v)
			} else {
				haveOut, ro.OutputTokens = true, int(v)
			}
		default:
			return Query{}, false
		}
	}
	s.ws()
	if s.i != len(s.b) {
		return Query{}, false
	}
	switch {
	case haveLora || haveNS || haveEagle:
		if !haveTokens || !haveBS {
			return Query{}, false // only valid with tokens: the streaming decoder says so
		}
	case haveSeqs, haveLocals:
		return q, true
	}
	if haveTokens && haveBS {
		bs := int(blockSize)
		if nTokens/bs > MaxBlocks {
			return Query{}, false
		}
		o := ckf.BlockOptions{Seed: ckf.SaltedSeed(string(lora), string(ns)), Eagle: eagle}
		return Query{Locals: hashTokens(&tokens, nTokens, bs, o), BlockSize: bs, Model: q.Model}, true
	}
	return Query{}, false
}

// fastScanner walks a JSON body; every method returns false to mean "not
// certain", never "invalid".
type fastScanner struct {
	b []byte
	i int
}

func (s *fastScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *fastScanner) eat(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// key reads a plain (escape-free, ASCII) object key and its colon.
func (s *fastScanner) key() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c == '"' {
			k := s.b[start:s.i]
			s.i++
			return k, s.eat(':')
		}
		if c == '\\' || c < 0x20 || c >= 0x80 {
			return nil, false
		}
		s.i++
	}
	return nil, false
}

// str reads a plain (escape-free, ASCII) string value of at most limit
// bytes.
func (s *fastScanner) str(limit int) ([]byte, bool) {
	s.ws()
	if !s.eat('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) && s.i-start <= limit {
		c := s.b[s.i]
		if c == '"' {
			v := s.b[start:s.i]
			s.i++
			return v, true
		}
		if c == '\\' || c < 0x20 || c >= 0x80 {
			return nil, false
		}
		s.i++
	}
	return nil, false
}

// boolean reads true or false.
func (s *fastScanner) boolean() (bool, bool) {
	s.ws()
	rest := s.b[s.i:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		s.i += 4
		return true, true
	case len(rest) >= 5 && string(rest[:5]) == "false":
		s.i += 5
		return false, true
	}
	return false, false
}

// uint reads a plain JSON unsigned integer (no sign, fraction, exponent or
// leading zero) that fits in a u64.
func (s *fastScanner) uint() (uint64, bool) {
	s.ws()
	start := s.i
	var v uint64
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c < '0' || c > '9' {
			break
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
		s.i++
	}
	n := s.i - start
	if n == 0 || (n > 1 && s.b[start] == '0') {
		return 0, false
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	return v, true
}

// u64Array reads a non-null array of at most limit plain unsigned
// integers.
func u64Array[T ~uint64](s *fastScanner, limit int) ([]T, bool) {
	if !s.eat('[') {
		return nil, false
	}
	out := make([]T, 0, min(64, (len(s.b)-s.i)/2+1))
	if s.eat(']') {
		return out, true
	}
	for {
		if len(out) == limit {
			return nil, false
		}
		v, ok := s.uint()
		if !ok {
			return nil, false
		}
		out = append(out, T(v))
		if s.eat(']') {
			return out, true
		}
		if !s.eat(',') {
			return nil, false
		}
	}
}

// u32ArrayLen validates a non-null array of at most limit plain unsigned
// integers below 2^32 and returns its length, keeping nothing.
func u32ArrayLen(s *fastScanner, limit int) (int, bool) {
	if !s.eat('[') {
		return 0, false
	}
	if s.eat(']') {
		return 0, true
	}
	for n := 0; ; {
		if n == limit {
			return 0, false
		}
		v, ok := s.uint()
		if !ok || v > 1<<32-1 {
			return 0, false
		}
		n++
		if s.eat(']') {
			return n, true
		}
		if !s.eat(',') {
			return 0, false
		}
	}
}

// hashTokens hashes the n tokens of the array s is positioned at (which
// u32ArrayLen accepted) in blocks of bs with options o, holding one window.
func hashTokens(s *fastScanner, n, bs int, o ckf.BlockOptions) []ckf.LocalBlockHash {
	out := make([]ckf.LocalBlockHash, 0, n/bs)
	h := ckf.NewTokenHasher(bs, o)
	s.eat('[')
	for range n {
		v, _ := s.uint()
		if sum, ok := h.Add(uint32(v)); ok {
			out = append(out, sum)
		}
		s.eat(',')
	}
	return out
}
