package authconf

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/pkg/lease"
)

// A lease bucket created before per-key TTLs (as an older release or an
// operator by hand made it) is upgraded in place by whichever relay or
// indexer opens it first, under that role's permissions alone.
func TestARelayOrIndexerUpgradesAnOldLeaseBucketWithinItsPermissions(t *testing.T) {
	for _, role := range []string{"relay-dc-a", "indexer"} {
		t.Run(role, func(t *testing.T) {
			srv, users := permServer(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			admin := connectAs(t, srv, adminUser)
			if _, err := admin.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: lease.DefaultBucket, History: 1}); err != nil {
				t.Fatal(err)
			}
			rc := connectAs(t, srv, users[role])
			if _, err := lease.New(ctx, rc.js); err != nil {
				t.Fatalf("%s could not open the old bucket: %v", role, err)
			}
			s, err := admin.js.Stream(ctx, "KV_"+lease.DefaultBucket)
			if err != nil {
				t.Fatal(err)
			}
			if !s.CachedInfo().Config.AllowMsgTTL {
				t.Fatal("the bucket was not upgraded to per-key TTLs")
			}
			requireNoViolation(t, role, rc)
		})
	}
}
