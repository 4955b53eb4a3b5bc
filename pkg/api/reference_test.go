package api

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

type referenceRequest struct {
	Tokens         *[]uint32 `json:"tokens"`
	BlockSize      *int      `json:"block_size"`
	LoraName       *string   `json:"lora_name"`
	CacheNamespace *string   `json:"cache_namespace"`
	Eagle          *bool     `json:"eagle"`
	LocalHashes    *[]uint64 `json:"local_hashes"`
	SequenceHashes *[]uint64 `json:"sequence_hashes"`
}

// referenceDecode is the whole-body decoder DecodeMatchRequestFrom
// replaced; the differential fuzz target holds the streaming one to it.
func referenceDecode(body []byte) (Query, error) {
	if len(body) > MaxRequestBytes {
		return Query{}, &RequestError{Reason: fmt.Sprintf("request body exceeds %d bytes", MaxRequestBytes)}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var req referenceRequest
	if err := dec.Decode(&req); err != nil {
		return Query{}, jsonError(err)
	}
	if dec.More() {
		return Query{}, &RequestError{Reason: "trailing data after the JSON object"}
	}
	given := 0
	for _, p := range []bool{req.Tokens != nil, req.LocalHashes != nil, req.SequenceHashes != nil} {
		if p {
			given++
		}
	}
	if given != 1 {
		return Query{}, &RequestError{Field: "tokens|local_hashes|sequence_hashes", Reason: "exactly one must be given"}
	}
	switch {
	case req.Tokens != nil:
		if req.BlockSize == nil {
			return Query{}, &RequestError{Field: "block_size", Reason: "required with tokens"}
		}
		bs := *req.BlockSize
		if bs <= 0 || bs > MaxBlockSize {
			return Query{}, &RequestError{Field: "block_size", Reason: fmt.Sprintf("must be within 1..%d", MaxBlockSize)}
		}
		if len(*req.Tokens)/bs > MaxBlocks {
			return Query{}, &RequestError{Field: "tokens", Reason: fmt.Sprintf("more than %d blocks", MaxBlocks)}
		}
		var o ckf.BlockOptions
		o.Seed = ckf.SaltedSeed(deref(req.LoraName), deref(req.CacheNamespace))
		o.Eagle = req.Eagle != nil && *req.Eagle
		return Query{Locals: ckf.LocalBlockHashesWith(make([]ckf.LocalBlockHash, 0, len(*req.Tokens)/bs), *req.Tokens, bs, o), BlockSize: bs}, nil
	case req.BlockSize != nil:
		return Query{}, &RequestError{Field: "block_size", Reason: "only valid with tokens"}
	case req.LoraName != nil:
		return Query{}, &RequestError{Field: "lora_name", Reason: "only valid with tokens"}
	case req.CacheNamespace != nil:
		return Query{}, &RequestError{Field: "cache_namespace", Reason: "only valid with tokens"}
	case req.Eagle != nil:
		return Query{}, &RequestError{Field: "eagle", Reason: "only valid with tokens"}
	case req.LocalHashes != nil:
		if len(*req.LocalHashes) > MaxBlocks {
			return Query{}, &RequestError{Field: "local_hashes", Reason: fmt.Sprintf("more than %d blocks", MaxBlocks)}
		}
		out := make([]ckf.LocalBlockHash, len(*req.LocalHashes))
		for i, h := range *req.LocalHashes {
			out[i] = ckf.LocalBlockHash(h)
		}
		return Query{Locals: out}, nil
	default:
		if len(*req.SequenceHashes) > MaxBlocks {
			return Query{}, &RequestError{Field: "sequence_hashes", Reason: fmt.Sprintf("more than %d blocks", MaxBlocks)}
		}
		out := make([]ckf.SequenceHash, len(*req.SequenceHashes))
		for i, h := range *req.SequenceHashes {
			out[i] = ckf.SequenceHash(h)
		}
		return Query{Seqs: out}, nil
	}
}
