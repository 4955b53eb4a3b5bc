package kvrelay

import (
	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
)

// Format returns the CBI1 format of the key's lane. It cannot fail: KeyOf
// only builds keys whose CKF format validated.
func (k ProducerKey) Format() cbi1.Format {
	f, err := cbi1.NewFormat(k.Seed, k.BucketCount)
	if err != nil {
		// Unreachable for keys from KeyOf; a hand-built key gets the zero
		// Format, which every cbi1 decoder rejects.
		return cbi1.Format{}
	}
	return f
}

// CheckFilterUpdate applies the stateless per-frame rules of a
// SubscribeKvPool stream subscribed to key (§4.2, §4.4) and returns the
// decoded CBI1 payload (the zero Frame for a heartbeat). In order:
//
//	envelope (marker, version, relay present) → producer present and valid →
//	producer key == key (ErrProducerMismatch) → by kind:
//	  SNAPSHOT_CHUNK: base_sequence = sequence; payload decodes as a chunk of
//	    the key's format with header dc_id = pool dc_id and epoch = sequence
//	  DELTA: sequence = base_sequence + 1; payload decodes as a delta with
//	    dc_id = pool dc_id, epoch = sequence, base_epoch = base_sequence
//	  HEARTBEAT: empty payload; base_sequence = sequence
//	  anything else: ErrFilterUpdateKind.
//
// The stream state stays with the caller: the relay identity must not change
// within the stream, chunks go to a cbi1.Assembler, a delta applies only when
// base_sequence equals the installed sequence, and a heartbeat is valid only
// after installation and only at the installed sequence. Any error means:
// invalidate this pool replica, end the stream, refresh the catalog.
// The returned Frame aliases u.Payload.
func CheckFilterUpdate(key ProducerKey, u *kvrelayv1.FilterUpdate) (cbi1.Frame, error) {
	if err := ValidateResponseEnvelope(u.GetProtocolVersion(), u.GetContractMarker(), u.GetRelay()); err != nil {
		return cbi1.Frame{}, err
	}
	got, err := KeyOf(u.GetProducer())
	if err != nil {
		return cbi1.Frame{}, err
	}
	if got != key {
		return cbi1.Frame{}, &ValidationError{Kind: ErrProducerMismatch, Field: "filter update producer"}
	}
	base, seq := u.GetBaseSequence(), u.GetSequence()
	switch kind := u.GetKind(); kind {
	case kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_SNAPSHOT_CHUNK:
		if base != seq {
			return cbi1.Frame{}, &ValidationError{Kind: ErrFrameSequence, Field: "snapshot chunk base_sequence != sequence"}
		}
		return decodePayload(key, u.GetPayload(), cbi1.KindSnapshotChunk, seq, 0)
	case kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_DELTA:
		if base == ^uint64(0) || seq != base+1 {
			return cbi1.Frame{}, &ValidationError{Kind: ErrFrameSequence, Field: "delta sequence != base_sequence + 1"}
		}
		return decodePayload(key, u.GetPayload(), cbi1.KindDelta, seq, base)
	case kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_HEARTBEAT:
		if n := len(u.GetPayload()); n != 0 {
			return cbi1.Frame{}, &ValidationError{Kind: ErrHeartbeatPayload, Field: "heartbeat payload", Value: int64(n)}
		}
		if base != seq {
			return cbi1.Frame{}, &ValidationError{Kind: ErrFrameSequence, Field: "heartbeat base_sequence != sequence"}
		}
		return cbi1.Frame{}, nil
	default:
		return cbi1.Frame{}, verr(ErrFilterUpdateKind, "filter update kind", int64(kind))
	}
}

func decodePayload(key ProducerKey, payload []byte, want cbi1.Kind, seq, base uint64) (cbi1.Frame, error) {
	fr, err := cbi1.Decode(key.Format(), payload)
	if err != nil {
		return cbi1.Frame{}, &ValidationError{Kind: ErrPayload, Field: "CBI1 payload", Err: err}
	}
	switch {
	case fr.Header.Kind != want:
		return cbi1.Frame{}, &ValidationError{Kind: ErrPayload, Field: "CBI1 kind " + fr.Header.Kind.String() + " under envelope kind " + want.String()}
	case fr.Header.DcID != key.DcID:
		return cbi1.Frame{}, &ValidationError{Kind: ErrPayload, Field: "CBI1 dc_id differs from the pool's"}
	case fr.Header.Epoch != seq:
		return cbi1.Frame{}, &ValidationError{Kind: ErrPayload, Field: "CBI1 epoch differs from sequence"}
	case want == cbi1.KindDelta && fr.Delta.BaseEpoch != base:
		return cbi1.Frame{}, &ValidationError{Kind: ErrPayload, Field: "CBI1 base_epoch differs from base_sequence"}
	}
	return fr, nil
}
