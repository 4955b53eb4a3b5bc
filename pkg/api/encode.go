package api

import (
	"encoding/json"
	"strconv"
)

// AppendJSON appends r's JSON, byte for byte what encoding/json writes for
// it, without reflection: the match endpoint answers every request with
// one.
func (r *MatchResponse) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"ready_lanes":`...)
	dst = strconv.AppendUint(dst, uint64(r.ReadyLanes), 10)
	dst = append(dst, `,"blocks":`...)
	dst = strconv.AppendInt(dst, int64(r.Blocks), 10)
	dst = append(dst, `,"lanes":`...)
	if r.Lanes == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range r.Lanes {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = r.Lanes[i].appendJSON(dst)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"best":`...)
	if r.Best == nil {
		dst = append(dst, "null"...)
	} else {
		dst = r.Best.appendJSON(dst)
	}
	return append(dst, '}')
}

func (l *LaneDepth) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"lane":`...)
	dst = strconv.AppendInt(dst, int64(l.Lane), 10)
	dst = append(dst, `,"dc":`...)
	dst = appendJSONString(dst, l.DC)
	dst = append(dst, `,"pool":`...)
	dst = appendJSONString(dst, l.Pool)
	dst = append(dst, `,"depth":`...)
	dst = strconv.AppendUint(dst, uint64(l.Depth), 10)
	dst = append(dst, `,"age_ms":`...)
	dst = strconv.AppendInt(dst, l.AgeMs, 10)
	if l.Stale {
		dst = append(dst, `,"stale":true}`...)
		return dst
	}
	return append(dst, `,"stale":false}`...)
}

// appendJSONString writes s quoted. DC names and pool ids are plain ASCII
// tokens; anything else (escapes, HTML characters, non-ASCII) is left to
// encoding/json so the bytes stay exactly its bytes.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always marshals
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
