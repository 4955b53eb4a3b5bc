package consumer

import "github.com/ckfrelay/ckfrelay/pkg/ckf"

// NextSequenceHash is ckf.NextSequenceHash, kept for callers that chain
// hashes on a query path (the bench's exact index uses it, so both indexes
// pay the same hashing cost).
func NextSequenceHash(parent ckf.SequenceHash, local ckf.LocalBlockHash) ckf.SequenceHash {
	return ckf.NextSequenceHash(parent, local)
}
