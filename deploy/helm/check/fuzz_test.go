package main

import (
	"strings"
	"testing"
)

// Decode takes whatever a template renders: it errs or decodes, never
// panics, and a decoded object has a kind and a name.
func FuzzDecode(f *testing.F) {
	f.Add("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n")
	f.Add("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nspec: {replicas: 1}\n")
	f.Add("apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {ports: [{port: 1}]}\nspec: {}\n")
	f.Fuzz(func(t *testing.T, doc string) {
		o, err := Decode(Manifest{Source: "fuzz", Text: doc})
		if err == nil && (o.Kind == "" || o.Meta == nil || o.Meta.Name == "") {
			t.Fatalf("decoded %q without a kind or name", doc)
		}
	})
}

// expand leaves a string without "$" as it is, and never panics.
func FuzzExpand(f *testing.F) {
	f.Add("--instance=$(POD_NAME)")
	f.Add("$$(X)$")
	f.Add("$(")
	f.Fuzz(func(t *testing.T, s string) {
		got := expand(s, map[string]string{"POD_NAME": "p-0", "X": "$(X)"})
		if !strings.Contains(s, "$") && got != s {
			t.Fatalf("expand(%q) = %q", s, got)
		}
	})
}

// splitDocuments keeps every non-comment line of its input.
func FuzzSplitDocuments(f *testing.F) {
	f.Add("a: 1\n---\nb: 2\n")
	f.Add("# c\n---\n---\n")
	f.Fuzz(func(t *testing.T, s string) {
		kept := strings.Join(splitDocuments(s), "\n")
		for _, line := range strings.Split(s, "\n") {
			if t2 := strings.TrimSpace(line); t2 != "" && !strings.HasPrefix(t2, "#") && strings.TrimRight(line, " \t") != "---" &&
				!strings.HasPrefix(line, "--- ") && !strings.Contains(kept, line) {
				t.Fatalf("line %q of %q lost", line, s)
			}
		}
	})
}
