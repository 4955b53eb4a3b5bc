package main

import (
	"testing"

	"sigs.k8s.io/yaml"
)

// mergeYAML overlays overlay's maps onto base's, as a second -f file does.
func mergeYAML(t *testing.T, base, overlay []byte) []byte {
	t.Helper()
	var b, o map[string]any
	if err := yaml.Unmarshal(base, &b); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(overlay, &o); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(merge(b, o))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func merge(b, o map[string]any) map[string]any {
	if b == nil {
		b = map[string]any{}
	}
	for k, v := range o {
		if om, ok := v.(map[string]any); ok {
			if bm, ok := b[k].(map[string]any); ok {
				b[k] = merge(bm, om)
				continue
			}
		}
		b[k] = v
	}
	return b
}
