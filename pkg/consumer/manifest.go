package consumer

import "github.com/ckfrelay/ckfrelay/pkg/ckf"

// Manifest is GlobalCkfManifest (spec §8.2): one consumer instance, exactly
// one indexer domain, one immutable CKF format and at most one pool per DC
// lane. A Manifest is immutable once built; Indexer.ConfigureLane publishes a
// new Manifest rather than mutating one.
type Manifest struct {
	consumer        ckf.ConsumerInstanceID
	domain          ckf.IndexerDomainID
	format          ckf.FormatIdentity
	lanes           [ckf.LaneCount]ckf.PoolID
	configuredLanes uint16
	joinsOnDefaults bool
}

// NewManifest validates lanes in lane order: a pool of another domain is
// ErrMixedIndexerDomain, a repeated pool ErrDuplicatePool, a repeated DC
// ErrDuplicateDcLane; no configured lane is ErrNoConfiguredLanes. Nil entries
// are unconfigured lanes. Joining several DCs under a default-derived domain
// is allowed; JoinsOnDefaults reports it so the caller can warn (upstream
// logs a warning).
func NewManifest(consumer ckf.ConsumerInstanceID, domain ckf.IndexerDomainID, format ckf.FormatIdentity, lanes [ckf.LaneCount]*ckf.PoolID) (*Manifest, error) {
	m := &Manifest{consumer: consumer, domain: domain, format: format}
	for lane, pool := range lanes {
		if pool == nil {
			continue
		}
		if err := m.admit(lane, *pool); err != nil {
			return nil, err
		}
		m.lanes[lane] = *pool
		m.configuredLanes |= 1 << lane
	}
	if m.configuredLanes == 0 {
		return nil, &BuildError{Kind: ErrNoConfiguredLanes}
	}
	m.joinsOnDefaults = m.computeJoinsOnDefaults()
	return m, nil
}

// admit checks one more pool against the lanes already configured, in the
// order of spec §8.2. Within one domain a duplicate pool is also a duplicate
// DC; both checks stay explicit in case PoolID gains another dimension.
func (m *Manifest) admit(lane int, pool ckf.PoolID) error {
	if pool.Domain != m.domain {
		return &BuildError{Kind: ErrMixedIndexerDomain, Lane: lane, Expected: m.domain, Actual: pool.Domain}
	}
	for other := range ckf.LaneCount {
		if m.configuredLanes&(1<<other) != 0 && m.lanes[other] == pool {
			return &BuildError{Kind: ErrDuplicatePool, Pool: pool}
		}
	}
	for other := range ckf.LaneCount {
		if m.configuredLanes&(1<<other) != 0 && m.lanes[other].Dc == pool.Dc {
			return &BuildError{Kind: ErrDuplicateDcLane, Dc: pool.Dc}
		}
	}
	return nil
}

func (m *Manifest) computeJoinsOnDefaults() bool {
	// Every configured lane has a distinct DC, so more than one lane means
	// more than one DC.
	multi := m.configuredLanes&(m.configuredLanes-1) != 0
	return multi && m.domain.ReliesOnDefaults()
}

// withLane returns a copy of m with lane configured for pool, validated like
// NewManifest.
func (m *Manifest) withLane(lane int, pool ckf.PoolID) (*Manifest, error) {
	if lane < 0 || lane >= ckf.LaneCount {
		return nil, &BuildError{Kind: ErrInvalidLane, Lane: lane}
	}
	if m.configuredLanes&(1<<lane) != 0 {
		return nil, &BuildError{Kind: ErrLaneAlreadyConfigured, Lane: lane}
	}
	if err := m.admit(lane, pool); err != nil {
		return nil, err
	}
	next := *m
	next.lanes[lane] = pool
	next.configuredLanes |= 1 << lane
	next.joinsOnDefaults = next.computeJoinsOnDefaults()
	return &next, nil
}

// ConsumerInstance returns the consumer instance id.
func (m *Manifest) ConsumerInstance() ckf.ConsumerInstanceID { return m.consumer }

// Domain returns the single indexer domain.
func (m *Manifest) Domain() ckf.IndexerDomainID { return m.domain }

// Format returns the immutable CKF format every producer must match.
func (m *Manifest) Format() ckf.FormatIdentity { return m.format }

// ConfiguredLanes returns the mask of configured lanes.
func (m *Manifest) ConfiguredLanes() uint16 { return m.configuredLanes }

// PoolID returns the pool of a configured lane.
func (m *Manifest) PoolID(lane int) (ckf.PoolID, bool) {
	if lane < 0 || lane >= ckf.LaneCount || m.configuredLanes&(1<<lane) == 0 {
		return ckf.PoolID{}, false
	}
	return m.lanes[lane], true
}

// JoinsOnDefaults reports that several DCs are joined under a domain with a
// default-derived dimension: allowed, but worth a warning.
func (m *Manifest) JoinsOnDefaults() bool { return m.joinsOnDefaults }
