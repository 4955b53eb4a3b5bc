package relay

import "slices"

// State is where the relay is in its life cycle.
type State string

const (
	StateStarting   State = "starting"
	StateStandby    State = "standby"
	StateRebuilding State = "rebuilding"
	StateActive     State = "active"
	StateStopped    State = "stopped"
)

var allStates = []State{StateStarting, StateStandby, StateRebuilding, StateActive, StateStopped}

// Status is a point-in-time view for health endpoints and tests.
type Status struct {
	State        State  `json:"state"`
	Domain       string `json:"domain"`
	DC           string `json:"dc"`
	Instance     string `json:"instance"`
	Lane         int    `json:"lane"`
	Epoch        uint64 `json:"epoch"`
	Sequence     uint64 `json:"sequence"`
	InputSeq     uint64 `json:"input_sequence"`
	Events       uint64 `json:"events"`
	UniqueBlocks int    `json:"unique_blocks"`
	// InputGap is how many input stream sequences the last rebuild needed
	// but the stream no longer held (see ckf_relay_input_gap_messages_total).
	InputGap uint64 `json:"input_gap"`
	// Refused counts worker events refused whole (ckf_relay_refusals_total).
	Refused uint64 `json:"refused_events"`
	// Faults lists the standing faults ("kind: detail"), empty when none:
	// epoch_exhausted, tracked_blocks, setup, refused_events (see
	// ckf_relay_fault).
	Faults []string `json:"faults"`
}

// Standing fault kinds (Status.Faults, ckf_relay_fault{kind}).
const (
	FaultEpochExhausted = "epoch_exhausted"
	FaultTrackedBlocks  = "tracked_blocks"
	FaultSetup          = "setup"
	// FaultRefusedEvents: most of some worker's recent events were
	// refused (parent_block_not_found, invalid_block_sequence, ...): the
	// index is missing that worker's blocks.
	FaultRefusedEvents = "refused_events"
)

// Status returns the current status.
func (r *Relay) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.status
	st.Faults = make([]string, 0, len(r.faults))
	for k, d := range r.faults {
		st.Faults = append(st.Faults, k+": "+d)
	}
	slices.Sort(st.Faults)
	return st
}

// setFault records a standing fault; it logs only when the fault starts.
func (r *Relay) setFault(kind, detail string) {
	r.mu.Lock()
	_, had := r.faults[kind]
	if r.faults == nil {
		r.faults = make(map[string]string)
	}
	r.faults[kind] = detail
	r.mu.Unlock()
	r.m.fault.WithLabelValues(kind).Set(1)
	if !had {
		r.log.Error().Str("fault", kind).Str("detail", detail).Msg("relay fault")
	}
}

// clearFault ends a standing fault.
func (r *Relay) clearFault(kind string) {
	r.mu.Lock()
	_, had := r.faults[kind]
	delete(r.faults, kind)
	r.mu.Unlock()
	if had {
		r.m.fault.WithLabelValues(kind).Set(0)
		r.log.Info().Str("fault", kind).Msg("relay fault cleared")
	}
}

func (r *Relay) update(fn func(*Status)) {
	r.mu.Lock()
	fn(&r.status)
	r.mu.Unlock()
}

func (r *Relay) setState(s State) {
	r.update(func(st *Status) { st.State = s })
	for _, x := range allStates {
		v := 0.0
		if x == s {
			v = 1
		}
		r.m.state.WithLabelValues(string(x)).Set(v)
	}
}
