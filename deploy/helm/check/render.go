package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"sigs.k8s.io/yaml"
)

// Manifest is one YAML document of a rendered release.
type Manifest struct {
	// Source is the template it came from and its index there, e.g.
	// "ckfrelay/templates/relay.yaml#2".
	Source string
	Text   string
}

// Rendered is a release as Helm's engine renders it, before any cluster.
type Rendered struct {
	Manifests []Manifest
	// Values are the release's values (the chart's defaults merged with
	// the values file), as the templates saw them.
	Values map[string]any
}

// Render renders chartDir with values (YAML, as a -f file holds them) the
// way `helm template` does: the chart's values coalesced with these,
// checked against values.schema.json, every template but NOTES.txt and
// partials rendered.
func Render(chartDir string, values []byte, release, namespace string) (*Rendered, error) {
	ch, err := loader.LoadDir(chartDir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", chartDir, err)
	}
	if err := ch.Validate(); err != nil {
		return nil, fmt.Errorf("chart %s: %w", chartDir, err)
	}
	var user map[string]any
	if err := yaml.UnmarshalStrict(values, &user); err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	if user == nil {
		user = map[string]any{}
	}
	opts := common.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}
	top, err := util.ToRenderValues(ch, user, opts, nil)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	vals, _ := top["Values"].(common.Values)
	out := &Rendered{Values: vals}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		for i, doc := range splitDocuments(files[name]) {
			out.Manifests = append(out.Manifests, Manifest{Source: fmt.Sprintf("%s#%d", name, i), Text: doc})
		}
	}
	return out, nil
}

// RenderFile renders chartDir with a values file.
func RenderFile(chartDir, valuesFile, release, namespace string) (*Rendered, error) {
	b, err := os.ReadFile(valuesFile)
	if err != nil {
		return nil, err
	}
	r, err := Render(chartDir, b, release, namespace)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", valuesFile, err)
	}
	return r, nil
}

// splitDocuments splits a YAML stream at its "---" lines and drops the
// documents that hold only comments and blank lines.
func splitDocuments(s string) []string {
	var docs []string
	var cur []string
	flush := func() {
		doc := strings.Join(cur, "\n")
		cur = cur[:0]
		for _, line := range strings.Split(doc, "\n") {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				docs = append(docs, doc)
				return
			}
		}
	}
	for _, line := range strings.Split(s, "\n") {
		if strings.TrimRight(line, " \t") == "---" || strings.HasPrefix(line, "--- ") {
			flush()
			continue
		}
		cur = append(cur, line)
	}
	flush()
	return docs
}
