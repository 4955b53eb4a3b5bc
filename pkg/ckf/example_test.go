package ckf_test

import (
	"fmt"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// A request's tokens become one local hash per full block, then the chain
// of sequence hashes a lane is probed with. A trailing partial block is
// not hashed: no worker can have cached it.
func ExampleLocalBlockHashes() {
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	locals := ckf.LocalBlockHashes(nil, tokens, 4)
	seqs := ckf.SequenceHashes(nil, locals)
	fmt.Println(len(locals), "blocks")
	fmt.Println(seqs[0] == ckf.SequenceHash(locals[0]), "the first sequence hash is its local hash")
	fmt.Println(seqs[1] == ckf.NextSequenceHash(seqs[0], locals[1]), "each next one chains its parent")
	// Output:
	// 2 blocks
	// true the first sequence hash is its local hash
	// true each next one chains its parent
}

// Every DC name maps to a stable 64-bit id, the same one Dynamo derives.
func ExampleDcIDFromName() {
	fmt.Println(ckf.DcIDFromName("dc-a"))
	// Output: 04f110c98b1bfc48
}
