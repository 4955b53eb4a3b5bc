package archcheck

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/ckfrelay/ckfrelay"

// repoRoot is the module root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found above %s: %v", root, err)
	}
	return root
}

// internalImports returns, for every Go file below dir (tests included),
// the imports of this module's internal/ tree, as "file: path".
func internalImports(t *testing.T, dir string) []string {
	t.Helper()
	var bad []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
			return err
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			if path == module+"/internal" || strings.HasPrefix(path, module+"/internal/") {
				bad = append(bad, p+": "+path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bad
}

// TestPublicPackagesImportNoInternal: what a user may import (pkg/) runs
// on nothing a user may not; the services sit on top of it.
func TestPublicPackagesImportNoInternal(t *testing.T) {
	for _, imp := range internalImports(t, filepath.Join(repoRoot(t), "pkg")) {
		t.Errorf("pkg/ imports internal/: %s", imp)
	}
}

// TestInternalImportsFound guards the check itself: a tree that does
// import internal/ (this module's own services) must be reported.
func TestInternalImportsFound(t *testing.T) {
	if len(internalImports(t, filepath.Join(repoRoot(t), "cmd", "global-indexer"))) == 0 {
		t.Fatal("cmd/global-indexer imports internal/ services, yet none were found: the check is blind")
	}
}
