package lanerules

import (
	"errors"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
)

func TestZeroRulesAreTheBinarysDefaults(t *testing.T) {
	d := Defaults()
	if d.MaxApplyLag != 100*time.Millisecond || d.MaxApplyLag == ckf.DefaultMaxDirtyToAppliedAge {
		t.Fatalf("default apply-lag bound %s, want the binary's 100ms, not the seed's %s", d.MaxApplyLag, ckf.DefaultMaxDirtyToAppliedAge)
	}
	if got := (Rules{}).WithDefaults(); got != d {
		t.Fatalf("zero rules with defaults %+v, want %+v", got, d)
	}
	pc := (Rules{}).PoolConfig()
	want := consumer.DefaultPoolConfig()
	want.MaxDirtyToAppliedAge = 100 * time.Millisecond
	if pc != want {
		t.Fatalf("pool config %+v, want %+v", pc, want)
	}
	if f, err := (Rules{}).Format(); f != nil || err != nil {
		t.Fatalf("no expected blocks: format %v %v, want none (learnt from the first snapshot)", f, err)
	}
	// A set field is kept.
	r := Rules{ExpectedBlocks: 1 << 15, Workers: 2, Queue: 8, MaxApplyLag: time.Second, ControlTimeout: time.Minute, LaneStaleAfter: time.Hour, StaleLanes: StaleExclude, SnapshotFetchTimeout: 3 * time.Second}
	if r.WithDefaults() != r {
		t.Fatalf("set rules changed by defaults: %+v", r.WithDefaults())
	}
	pc = r.PoolConfig()
	if pc.WorkerCount != 2 || pc.QueueCapacity != 8 || pc.MaxDirtyToAppliedAge != time.Second || pc.ControlTimeout != time.Minute {
		t.Fatalf("pool config %+v does not follow %+v", pc, r)
	}
	f, err := r.Format()
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := ckf.NewConfig(1 << 15).Format(); f == nil || *f != want {
		t.Fatalf("format %+v, want %+v", f, want)
	}
}

func TestInvalidRulesNameTheField(t *testing.T) {
	for field, r := range map[string]Rules{
		"Workers":              {Workers: -1},
		"Queue":                {Queue: -1},
		"MaxApplyLag":          {MaxApplyLag: -time.Second},
		"ControlTimeout":       {ControlTimeout: -time.Second},
		"LaneStaleAfter":       {LaneStaleAfter: -time.Second},
		"StaleLanes":           {StaleLanes: "drop"},
		"SnapshotFetchTimeout": {SnapshotFetchTimeout: -time.Second},
		"ExpectedBlocks":       {ExpectedBlocks: 1 << 62},
	} {
		var e *Error
		if err := r.Validate(); !errors.As(err, &e) || e.Field != field {
			t.Errorf("%+v: %v, want an *Error on %s", r, err, field)
		}
	}
	if err := (Rules{}).Validate(); err != nil {
		t.Fatal(err)
	}
}
