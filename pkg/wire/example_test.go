package wire_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// A consumer reads a lane message by its subject and its kind byte, then
// decodes it strictly: anything the encoder would not have produced is a
// typed *DecodeError, counted and dropped without touching the lane.
func ExamplePeekKind() {
	domain, err := ckf.DomainFromName("demo")
	if err != nil {
		panic(err)
	}
	subjects, err := wire.NewLaneSubjects("demo", "dc-a")
	if err != nil {
		panic(err)
	}
	hb := wire.Heartbeat{
		Identity: ckf.ProducerIdentity{
			Pool:                ckf.PoolID{Domain: domain, Dc: ckf.DcIDFromName("dc-a")},
			ProducerIncarnation: 3, LayoutGeneration: 1,
			Format: ckf.NewFormatIdentity(ckf.DefaultSeed, 1<<16),
		},
		Lease:         wire.WireLease{Epoch: 3, Instance: "relay-a"},
		Sequence:      42,
		RelayInstance: "relay-a",
		Time:          time.Unix(1_780_000_000, 0),
	}
	msg, err := wire.AppendHeartbeat(nil, &hb)
	if err != nil {
		panic(err)
	}

	kind, err := wire.PeekKind(msg)
	fmt.Println(subjects.For(kind), kind, err)
	got, err := wire.DecodeHeartbeat(msg)
	fmt.Println(got.Lease.Epoch, got.Sequence, got.RelayInstance, err)

	// One byte cut off: refused with its kind, nothing half-decoded.
	_, err = wire.DecodeHeartbeat(msg[:len(msg)-1])
	var de *wire.DecodeError
	fmt.Println(errors.As(err, &de))
	// Output:
	// ckf.demo.dc-a.hb hb <nil>
	// 3 42 relay-a <nil>
	// true
}
