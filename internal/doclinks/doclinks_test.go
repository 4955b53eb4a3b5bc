package doclinks

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The repository's own documentation: every relative link, anchor and
// cited path of README.md and docs/ resolves inside the repository.
// scripts/test.sh runs it (go test ./...), so a broken link fails the build.
func TestRepositoryDocs(t *testing.T) {
	root := filepath.Join("..", "..")
	c, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md (%v)", err)
	}
	for _, d := range docs {
		files = append(files, "docs/"+filepath.Base(d))
	}
	for _, f := range files {
		problems, err := c.CheckFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("%s", p)
		}
	}
}

func check(t *testing.T, file string) []string {
	t.Helper()
	c, err := New(filepath.Join("testdata", "repo"))
	if err != nil {
		t.Fatal(err)
	}
	problems, err := c.CheckFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range problems {
		out = append(out, p.String())
	}
	return out
}

// Good references pass: files, anchors (repeated headings too), HTML ids,
// other sites, globs, generated paths .gitignore anchors, path:line, and
// whatever sits in a fenced block; inline code that is not a repository
// path is left alone.
func TestGoodReferencesPass(t *testing.T) {
	for _, f := range []string{"README.md", "docs/guide.md"} {
		if got := check(t, f); len(got) != 0 {
			t.Errorf("%s: %q", f, got)
		}
	}
}

// Each kind of broken reference is reported with its line.
func TestBrokenReferencesFail(t *testing.T) {
	got := check(t, "docs/broken.md")
	// The fixture's targets are missing on purpose; spelled in parts here so
	// that no reader (or tool) takes them for documents this file cites.
	const md = ".md"
	want := []string{
		"docs/broken.md:3: gone" + md + ": no such file in the repository",
		"docs/broken.md:4: guide.md#no-such-heading: no heading with anchor #no-such-heading in docs/guide.md",
		"docs/broken.md:5: ../../elsewhere/DESIGN" + md + ": points outside the repository",
		"docs/broken.md:6: ../reference/CARD" + md + ": points outside the repository",
		"docs/broken.md:6: scripts/gone.sh: no such file in the repository",
		"docs/broken.md:6: docs/*.txt: no file in the repository matches",
		"docs/broken.md:7: ../scripts/missing.sh: no such file in the repository",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Slugs as GitHub renders them.
func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Query API (global-indexer)":                     "query-api-global-indexer",
		"The `guide`: one page":                          "the-guide-one-page",
		"6. llm-d ingestion: reference behaviour":        "6-llm-d-ingestion-reference-behaviour",
		"17. Test scenarios a faithful port should pass": "17-test-scenarios-a-faithful-port-should-pass",
		"Files (`deploy/`)":                              "files-deploy",
		"Pipeline against raw JetStream, at rate":        "pipeline-against-raw-jetstream-at-rate",
		"[Linked](https://x) heading":                    "linked-heading",
		"snake_case and **bold**":                        "snake_case-and-bold",
		"Ünïcode — dash":                                 "ünïcode--dash",
	} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
	got := Anchors([]byte("# A\n## A\n```\n# not a heading\n```\n## A\n<a name=\"x\"></a>\n"))
	if want := []string{"a", "a-1", "a-2", "x"}; !slices.Equal(got, want) {
		t.Fatalf("anchors %q, want %q", got, want)
	}
}
