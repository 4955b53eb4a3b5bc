package client

import (
	"errors"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/lanerules"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// A rule the binary would refuse at its flag is refused by NewMirror too,
// naming the rule.
func TestNewMirrorRefusesAnInvalidRule(t *testing.T) {
	srv := testenv.StartServer(t)
	_, err := NewMirror(srv.Connect(t), MirrorConfig{Domain: "rules", Rules: lanerules.Rules{StaleLanes: "drop"}})
	var re *lanerules.Error
	if !errors.As(err, &re) || re.Field != "StaleLanes" {
		t.Fatalf("NewMirror with stale lanes %q: %v, want a *lanerules.Error on StaleLanes", "drop", err)
	}
	if _, err := NewMirror(srv.Connect(t), MirrorConfig{Domain: "rules", Rules: lanerules.Rules{ExpectedBlocks: 1 << 15, StaleLanes: lanerules.StaleExclude}}); err != nil {
		t.Fatal(err)
	}
}
