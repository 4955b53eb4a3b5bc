package follow

import (
	"errors"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/testenv"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

func TestConfigValidate(t *testing.T) {
	good := ckf.NewFormatIdentity(ckf.DefaultSeed, 1024)
	cases := []struct {
		name  string
		edit  func(c *Config)
		field string
		cause error
	}{
		{"defaults", func(c *Config) {}, "", nil},
		{"explicit format", func(c *Config) { c.Format = &good }, "", nil},
		{"longest domain", func(c *Config) { c.Domain = "d234567890123456789012345678901234567890123456789012345678901234" }, "", nil},
		{"empty domain", func(c *Config) { c.Domain = "" }, "domain", wire.ErrInvalidToken},
		{"dotted domain", func(c *Config) { c.Domain = "a.b" }, "domain", wire.ErrInvalidToken},
		{"zero workers", func(c *Config) { c.Pool = consumer.DefaultPoolConfig(); c.Pool.WorkerCount = 0 }, "pool", consumer.ErrInvalidWorkerCount},
		{"zero queue", func(c *Config) { c.Pool = consumer.DefaultPoolConfig(); c.Pool.QueueCapacity = 0 }, "pool", consumer.ErrInvalidQueueCapacity},
		{"window 9", func(c *Config) { c.Search.VerificationWindow = 9 }, "search", ckf.ErrInvalidVerificationWindow},
		{"negative backoff", func(c *Config) { c.BootstrapBackoffMin = -time.Second }, "bootstrap_backoff", nil},
		{"max below min", func(c *Config) {
			c.BootstrapBackoffMin, c.BootstrapBackoffMax = time.Second, time.Millisecond
		}, "bootstrap_backoff", nil},
		{"negative poll", func(c *Config) { c.StatePollInterval = -1 }, "state_poll_interval", nil},
		{"negative rebuild spacing", func(c *Config) { c.PoolRebuildMin = -time.Second }, "pool_rebuild", nil},
		{"rebuild max below min", func(c *Config) {
			c.PoolRebuildMin, c.PoolRebuildMax = time.Second, time.Millisecond
		}, "pool_rebuild", nil},
		{"bucket count not a power of two", func(c *Config) {
			f := good
			f.BucketCount = 1000
			c.Format = &f
		}, "format.bucket_count", nil},
		{"bucket count too large", func(c *Config) {
			f := good
			f.BucketCount = wire.MaxBucketCount * 2
			c.Format = &f
		}, "format.bucket_count", nil},
		{"fingerprint bits", func(c *Config) {
			f := good
			f.FingerprintBits = 8
			c.Format = &f
		}, "format.fingerprint_bits", nil},
		{"format version", func(c *Config) {
			f := good
			f.FormatVersion = 2
			c.Format = &f
		}, "format.format_version", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Domain: "default"}
			tc.edit(&c)
			err := c.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
			}
			var ie *Error
			if !errors.As(err, &ie) || ie.Field != tc.field {
				t.Fatalf("Validate = %v, want field %q", err, tc.field)
			}
			if tc.cause != nil && !errors.Is(err, tc.cause) {
				t.Fatalf("Validate = %v, want it to wrap %v", err, tc.cause)
			}
		})
	}
}

func TestNewRejectsBadConfigAndMissingConnection(t *testing.T) {
	e := newEnv(t)
	if _, err := New(e.nc, e.js, Config{Domain: "a b"}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New(bad domain) = %v, want ErrInvalidConfig", err)
	}
	if _, err := New(nil, e.js, Config{Domain: "a"}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New(nil conn) = %v, want ErrInvalidConfig", err)
	}
	s, err := New(e.nc, e.js, Config{Domain: "a", ConsumerInstance: 42})
	if err != nil {
		t.Fatal(err)
	}
	if s.ConsumerInstance() != 42 {
		t.Fatalf("consumer instance %d, want 42", s.ConsumerInstance())
	}
}

func TestWrongFormatLaneIsRefusedAndCounted(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a") // testBlocks → its own bucket count
	other := ckf.NewFormatIdentity(ckf.DefaultSeed, r.state.Format().BucketCount*2)
	cfg := testConfig(t)
	cfg.Format = &other
	s := startService(t, e.nc, e.js, cfg)
	lane := r.lane
	// The fault is counted before the lane's status records it: wait for
	// both, then check the lane never became ready.
	var st api.LaneStatus
	testenv.WaitFor(t, waitTotal, "condition not met", func() bool {
		if metricCount(s.reg, MetricFaults, itoa(lane), "kind", ErrWrongFormat.String()) == 0 {
			return false
		}
		var err error
		st, err = statusOf(s.Service, lane)
		return err == nil && st.LastFault != ""
	})
	if s.Ready() {
		t.Fatal("a lane of another format became ready")
	}
	if st.State == PhaseActive {
		t.Fatalf("lane status %+v, want a refused bootstrap with its fault", st)
	}
}
