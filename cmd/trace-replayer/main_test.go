package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestParseRejectsBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--dcs", "a,b.c"}, "dc"},
		{[]string{"--domain", ""}, "domain"},
		{[]string{"--speed", "-1"}, "speed"},
		{[]string{"--workers-per-dc", "0"}, "workers"},
		{[]string{"--affinity", "2"}, "affinity"},
		{[]string{"--dcs", "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q"}, "DCs"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), c.args, func(string) string { return "" }, &out, &errb); code != 2 {
			t.Fatalf("%v: exit %d", c.args, code)
		}
		if !strings.Contains(errb.String(), c.want) {
			t.Fatalf("%v: %q lacks %q", c.args, errb.String(), c.want)
		}
	}
}

func TestParseReadsTheEnvironment(t *testing.T) {
	o, err := parse(nil, func(k string) string {
		return map[string]string{"CKFRELAY_DCS": "x,y,z", "CKFRELAY_SPEED": "0", "CKFRELAY_REPEAT": "true"}[k]
	}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.rcfg.DCs) != 3 || o.speed != 0 || !o.repeat {
		t.Fatalf("%+v", o)
	}
}
