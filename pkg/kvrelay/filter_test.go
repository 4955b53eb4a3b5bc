package kvrelay_test

import (
	"errors"
	"testing"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
)

const (
	kindChunk     = kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_SNAPSHOT_CHUNK
	kindDelta     = kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_DELTA
	kindHeartbeat = kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_HEARTBEAT
)

func frameFixture(t testing.TB) (kvrelay.ProducerKey, cbi1.Format) {
	t.Helper()
	k, err := kvrelay.KeyOf(producer())
	if err != nil {
		t.Fatal(err)
	}
	return k, k.Format()
}

func update(kind kvrelayv1.FilterUpdateKind, base, seq uint64, payload []byte) *kvrelayv1.FilterUpdate {
	return &kvrelayv1.FilterUpdate{
		ProtocolVersion: 1, Relay: relay(), Producer: producer(), BaseSequence: base, Sequence: seq,
		SendTsUs: 1, Kind: kind, Payload: payload, ContractMarker: kvrelayv1.ContractMarker,
	}
}

func chunkPayload(t testing.TB, f cbi1.Format, dc, epoch uint64) []byte {
	t.Helper()
	lane := make([]uint64, f.BucketCount())
	lane[3] = 0x1234
	b, err := cbi1.AppendSnapshotChunk(nil, f, dc, epoch, lane, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func deltaPayload(t testing.TB, f cbi1.Format, dc, base, epoch uint64) []byte {
	t.Helper()
	b, err := cbi1.AppendDelta(nil, f, dc, base, epoch, []cbi1.Image{{Bucket: 5, Word: 9}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// §4.2/§4.4 per-frame rules and the frames of §8.1 scenarios 3 and 5.
func TestCheckFilterUpdate(t *testing.T) {
	key, f := frameFixture(t)
	dc := key.DcID

	fr, err := kvrelay.CheckFilterUpdate(key, update(kindChunk, 4, 4, chunkPayload(t, f, dc, 4)))
	if err != nil || fr.Header.Kind != cbi1.KindSnapshotChunk || fr.Chunk.Word(3) != 0x1234 {
		t.Fatalf("chunk: %+v %v", fr.Header, err)
	}
	a, _ := cbi1.NewAssembler(f)
	if s, done, err := a.Add(fr); err != nil || !done || s.Epoch != 4 {
		t.Fatalf("assembly of the checked chunk: %v %v", done, err)
	}
	fr, err = kvrelay.CheckFilterUpdate(key, update(kindDelta, 4, 5, deltaPayload(t, f, dc, 4, 5)))
	if err != nil || fr.Delta.Len() != 1 || fr.Delta.At(0) != (cbi1.Image{Bucket: 5, Word: 9}) {
		t.Fatalf("delta: %v", err)
	}
	if fr, err = kvrelay.CheckFilterUpdate(key, update(kindHeartbeat, 5, 5, nil)); err != nil || fr.Header.Kind != 0 {
		t.Fatalf("heartbeat: %v", err)
	}

	otherProducer := update(kindHeartbeat, 5, 5, nil)
	otherProducer.Producer.ProducerIncarnation++ // §8.2 scenario 26
	invalidProducer := update(kindHeartbeat, 5, 5, nil)
	invalidProducer.Producer.LayoutGeneration = 0
	noProducer := update(kindHeartbeat, 5, 5, nil)
	noProducer.Producer = nil
	noRelay := update(kindHeartbeat, 5, 5, nil)
	noRelay.Relay = nil
	badVersion := update(kindHeartbeat, 5, 5, nil)
	badVersion.ProtocolVersion = 2
	badMarker := update(kindHeartbeat, 5, 5, nil)
	badMarker.ContractMarker = 0
	badMarker.ProtocolVersion = 2
	otherSeed, _ := cbi1.NewFormat(f.Seed()^1, f.BucketCount())
	check := func(u *kvrelayv1.FilterUpdate) error {
		_, err := kvrelay.CheckFilterUpdate(key, u)
		return err
	}
	checkRules(t, []ruleCase{
		{name: "marker", err: check(badMarker), kind: kvrelay.ErrContractMarker},
		{name: "version", err: check(badVersion), kind: kvrelay.ErrProtocolVersion},
		{name: "relay", err: check(noRelay), kind: kvrelay.ErrMissingField, field: "relay"},
		{name: "no producer", err: check(noProducer), kind: kvrelay.ErrMissingField},
		{name: "invalid producer", err: check(invalidProducer), kind: kvrelay.ErrZeroLayoutGeneration},
		{name: "other incarnation", err: check(otherProducer), kind: kvrelay.ErrProducerMismatch},
		{name: "kind unspecified", err: check(update(0, 5, 5, nil)), kind: kvrelay.ErrFilterUpdateKind},
		{name: "kind 4", err: check(update(4, 5, 5, nil)), kind: kvrelay.ErrFilterUpdateKind, unsupported: true},
		{name: "chunk base != sequence", err: check(update(kindChunk, 3, 4, chunkPayload(t, f, dc, 4))), kind: kvrelay.ErrFrameSequence},
		{name: "chunk epoch != sequence", err: check(update(kindChunk, 5, 5, chunkPayload(t, f, dc, 4))), kind: kvrelay.ErrPayload},
		{name: "chunk dc != pool dc", err: check(update(kindChunk, 4, 4, chunkPayload(t, f, dc+1, 4))), kind: kvrelay.ErrPayload},
		{name: "chunk payload is a delta", err: check(update(kindChunk, 5, 5, deltaPayload(t, f, dc, 4, 5))), kind: kvrelay.ErrPayload},
		{name: "chunk payload empty", err: check(update(kindChunk, 4, 4, nil)), kind: kvrelay.ErrPayload},
		{name: "delta sequence != base+1", err: check(update(kindDelta, 4, 6, deltaPayload(t, f, dc, 4, 6))), kind: kvrelay.ErrFrameSequence},
		{name: "delta base max", err: check(update(kindDelta, ^uint64(0), 0, deltaPayload(t, f, dc, ^uint64(0), 0))), kind: kvrelay.ErrFrameSequence},
		{name: "delta body base != base", err: check(update(kindDelta, 4, 5, deltaPayload(t, f, dc, 3, 5))), kind: kvrelay.ErrPayload},
		{name: "delta epoch != sequence", err: check(update(kindDelta, 4, 5, deltaPayload(t, f, dc, 4, 6))), kind: kvrelay.ErrPayload},
		{name: "delta dc", err: check(update(kindDelta, 4, 5, deltaPayload(t, f, dc^1, 4, 5))), kind: kvrelay.ErrPayload},
		{name: "delta payload is a chunk", err: check(update(kindDelta, 4, 5, chunkPayload(t, f, dc, 5))), kind: kvrelay.ErrPayload},
		{name: "heartbeat payload", err: check(update(kindHeartbeat, 5, 5, []byte{0})), kind: kvrelay.ErrHeartbeatPayload},
		{name: "heartbeat base != sequence", err: check(update(kindHeartbeat, 4, 5, nil)), kind: kvrelay.ErrFrameSequence},
	})

	// A payload of another format fails in cbi1 and the cause is reachable.
	wrongFormat, err := cbi1.AppendDelta(nil, otherSeed, dc, 4, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = check(update(kindDelta, 4, 5, wrongFormat))
	if !errors.Is(err, kvrelay.ErrPayload) || !errors.Is(err, cbi1.ErrFormatMismatch) {
		t.Fatalf("wrong seed: %v", err)
	}
	// A payload error is malformed input: INVALID_PUBLICATION is the
	// server's word for its own invariants, so the consumer simply drops the
	// replica; Status of a bare payload error is INVALID_REQUEST.
	if code, r := kvrelay.Status(err); code.String() != "InvalidArgument" || r != rInvalid {
		t.Fatalf("Status(payload error) = %v %v", code, r)
	}
}

// The per-frame check of a delta allocates nothing beyond the message.
func TestCheckFilterUpdateAllocations(t *testing.T) {
	key, f := frameFixture(t)
	u := update(kindDelta, 4, 5, deltaPayload(t, f, key.DcID, 4, 5))
	if n := testing.AllocsPerRun(100, func() {
		if _, err := kvrelay.CheckFilterUpdate(key, u); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("CheckFilterUpdate allocates %.1f times per delta", n)
	}
}
